/**
 * The shipped Grafana dashboard read as its queries, and the check that each metric a query names is one the
 * workers export (histograms by their _bucket, _sum and _count series).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from '../queue/fixtures.js';

export const DASHBOARD = join(ROOT, 'config/grafana/memory-warden-fleet.json');

export function dashboardQueries(file = DASHBOARD): { panel: string; expr: string }[] {
  const dash = JSON.parse(readFileSync(file, 'utf8')) as { panels: { title: string; targets?: { expr: string }[] }[] };
  return dash.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));
}

/** Metric names the expressions use that appear in no `# TYPE` line or sample of the scraped text. */
export function unexportedMetrics(exprs: string[], exposition: string): string[] {
  const exported = new Set<string>();
  for (const line of exposition.split('\n')) {
    const m = /^(?:# TYPE )?([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(line);
    if (m && !line.startsWith('# HELP')) exported.add(m[1]!);
  }
  const named = new Set(exprs.flatMap((e) => e.match(/\bmemory_warden_[a-zA-Z0-9_]+/g) ?? []));
  return [...named].filter((n) => !exported.has(n)).sort();
}
