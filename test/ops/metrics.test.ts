import { describe, expect, it } from 'vitest';
import { WorkerMetrics } from '../../src/queue/metrics.js';

const at = Date.UTC(2026, 11, 2, 2, 0, 5);
const sample = async (m: WorkerMetrics, name: string) =>
  (await m.text()).split('\n').filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));

describe('the figures the alert rules and the dashboard read', () => {
  it('a snapshot run stamps each target it brought up to date; a failed run stamps none', async () => {
    const m = new WorkerMetrics({ defaultMetrics: false });
    m.recordRun('snapshot', 's1', 'failed', 1, { retried: true });
    expect(await sample(m, 'memory_warden_target_replicated_timestamp_seconds')).toEqual([]);
    m.recordRun('snapshot', 's1', 'ok', 1, { at, result: { name: 'x', rows: 3, targets: [{ target: 'nas', uploaded: ['x'] }, { target: 's3', uploaded: [] }, { target: 7 }, null] } });
    expect(await sample(m, 'memory_warden_target_replicated_timestamp_seconds')).toEqual([
      `memory_warden_target_replicated_timestamp_seconds{store="s1",target="nas"} ${at / 1000}`,
      `memory_warden_target_replicated_timestamp_seconds{store="s1",target="s3"} ${at / 1000}`,
    ]);
  });

  it('a digest run: settled deliveries stamp their scope and status; only sent ones count new and flagged rows', async () => {
    const m = new WorkerMetrics({ defaultMetrics: false });
    const deliveries = [
      { scope: 'all stores', status: 'sent', newRows: 4, flagged: 1 },
      { scope: 'b', status: 'already-sent', newRows: 9, flagged: 9 },
      { scope: 'c', status: 'quiet' },
      { scope: 'd', status: 'failed', newRows: 2, flagged: 2 },
      { scope: 'e', status: 'in-progress' },
      { scope: 5, status: 'sent', newRows: 1 },
    ];
    m.recordRun('digest', null, 'ok', 1, { at, result: { deliveries } });
    expect(await sample(m, 'memory_warden_digest_timestamp_seconds')).toEqual([
      `memory_warden_digest_timestamp_seconds{scope="all stores",status="sent"} ${at / 1000}`,
      `memory_warden_digest_timestamp_seconds{scope="b",status="already-sent"} ${at / 1000}`,
      `memory_warden_digest_timestamp_seconds{scope="c",status="quiet"} ${at / 1000}`,
    ]);
    expect(await sample(m, 'memory_warden_digest_new_rows_total')).toEqual(['memory_warden_digest_new_rows_total{scope="all stores"} 4']);
    expect(await sample(m, 'memory_warden_digest_flagged_rows_total')).toEqual(['memory_warden_digest_flagged_rows_total{scope="all stores"} 1']);
  });

  it("last successes from the state db survive a restart; what it does not know stays absent, not zero", async () => {
    const m = new WorkerMetrics({ defaultMetrics: false });
    m.seedLastSuccess({ s1: { prune: '2026-12-02 02:30:07', snapshot: 'not a time' }, '*': { digest: '2026-12-02T07:00:01Z' } });
    expect(await sample(m, 'memory_warden_last_success_timestamp_seconds')).toEqual([
      `memory_warden_last_success_timestamp_seconds{job="prune",store="s1"} ${Date.UTC(2026, 11, 2, 2, 30, 7) / 1000}`,
      `memory_warden_last_success_timestamp_seconds{job="digest",store="*"} ${Date.UTC(2026, 11, 2, 7, 0, 1) / 1000}`,
    ]);
  });
});
