import { describe, expect, it } from 'vitest';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from '../queue/fixtures.js';
import { shortenRules } from './prometheus.js';

const RULES = join(ROOT, 'config/alerts.yml');
const UNITS = ['alerts.promtool.yml', 'alerts-days.promtool.yml'];
const unitFile = (name: string) => join(ROOT, 'test/ops', name);

/** promtool from Debian's prometheus package; its absence fails the test (CI installs it), it is never skipped. */
function promtool(args: string[], cwd = ROOT): { status: number | null; out: string } {
  const p = spawnSync('promtool', args, { cwd, encoding: 'utf8' });
  if (p.error) throw new Error(`promtool ${args[0]}: ${p.error.message} (install Debian's prometheus package)`);
  return { status: p.status, out: `${p.stdout}${p.stderr}` };
}

const alertNames = (yaml: string) => [...yaml.matchAll(/^\s*- alert: (\S+)/gm)].map((m) => m[1]!);

describe('the shipped alert rules', { timeout: 120_000 }, () => {
  it('pass promtool check rules', () => {
    const r = promtool(['check', 'rules', RULES]);
    expect(r.out).toContain('SUCCESS');
    expect(r.status).toBe(0);
  });

  it('pass their unit tests (promtool test rules), and every alert has one', () => {
    const tested = UNITS.map((u) => readFileSync(unitFile(u), 'utf8')).join('\n');
    for (const name of alertNames(readFileSync(RULES, 'utf8'))) expect(tested, `a promtool test of ${name}`).toContain(`alertname: ${name}`);
    const r = promtool(['test', 'rules', ...UNITS.map(unitFile)]);
    expect(r.out).toContain('SUCCESS');
    expect(r.status).toBe(0);
  });

  it('the unit tests can fail: a rule that never fires, or fires on a near miss, is caught', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mw-alerts-'));
    try {
      const shipped = readFileSync(RULES, 'utf8');
      const mutants = [
        shipped.replace('max by (fleet_host) (memory_warden_fleet_host_silent) == 1', 'min by (fleet_host) (memory_warden_fleet_host_silent) == 1'),
        shipped.replace('unless on (job, store)', 'or on (job, store)'),
        shipped.replace('> 26 * 3600\n        for: 15m\n        labels: { severity: ticket }', '> 20 * 3600\n        for: 15m\n        labels: { severity: ticket }'),
        shipped.replace('and on () hour() >= 9', 'and on () hour() >= 7'),
      ];
      mutants.forEach((m, i) => {
        expect(m, `mutant ${i} differs from the shipped rules`).not.toBe(shipped);
        writeFileSync(join(dir, 'config-alerts.yml'), m);
        for (const u of UNITS) writeFileSync(join(dir, u), readFileSync(unitFile(u), 'utf8').replace('../../config/alerts.yml', 'config-alerts.yml'));
        expect(promtool(['test', 'rules', ...UNITS], dir).status, `mutant ${i}`).not.toBe(0);
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("the end-to-end copy changes only the waits: for:, ranges and offsets, and still passes promtool", () => {
    const shipped = readFileSync(RULES, 'utf8');
    const short = shortenRules(shipped);
    const strip = (s: string) => s.replace(/^(\s*for:\s*)\S+/gm, '$1X').replace(/\[[0-9smhdwy]+\]/g, '[X]').replace(/offset [0-9smhdwy]+/g, 'offset X');
    expect(strip(short)).toBe(strip(shipped));
    expect(short).not.toMatch(/for: (?!2s)/);
    const dir = mkdtempSync(join(tmpdir(), 'mw-alerts-'));
    try {
      writeFileSync(join(dir, 'short.yml'), short);
      expect(execFileSync('promtool', ['check', 'rules', join(dir, 'short.yml')], { encoding: 'utf8' })).toContain('SUCCESS');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
