import type { DayFigures } from './history.js';

/**
 * The store's last 30 days drawn on the server as inline SVG (no script, no remote anything): rows vs live rows
 * above (the gap between the lines is what prune and review have yet to deal with), and per day the rows pruned,
 * new and flagged below. Days with no integrity run leave a break in the lines. Colours are attributes, not
 * style, so the page's CSP needs no inline style.
 */
const W = 640;
const PAD = { left: 48, right: 8, top: 10, bottom: 22 };
const SERIES = [
  { key: 'pruned', label: 'pruned', colour: '#8c959f' },
  { key: 'newRows', label: 'new', colour: '#0969da' },
  { key: 'flagged', label: 'flagged', colour: '#cf222e' },
] as const;

const esc = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const r1 = (n: number) => Math.round(n * 10) / 10;

function axis(h: number, max: number, days: DayFigures[]): string {
  const y = (v: number) => r1(PAD.top + (1 - v / max) * (h - PAD.top - PAD.bottom));
  const first = days[0]?.day ?? '';
  const last = days[days.length - 1]?.day ?? '';
  return [
    `<line x1="${PAD.left}" y1="${y(0)}" x2="${W - PAD.right}" y2="${y(0)}" stroke="#d0d7de"/>`,
    `<text x="${PAD.left - 4}" y="${y(max) + 4}" text-anchor="end" font-size="10" fill="#57606a">${max}</text>`,
    `<text x="${PAD.left - 4}" y="${y(0)}" text-anchor="end" font-size="10" fill="#57606a">0</text>`,
    `<text x="${PAD.left}" y="${h - 6}" font-size="10" fill="#57606a">${esc(first)}</text>`,
    `<text x="${W - PAD.right}" y="${h - 6}" text-anchor="end" font-size="10" fill="#57606a">${esc(last)}</text>`,
  ].join('');
}

/** Polyline segments over the days that have a value. */
function lines(days: DayFigures[], pick: (d: DayFigures) => number | null, x: (i: number) => number, y: (v: number) => number): string[] {
  const segs: string[][] = [[]];
  days.forEach((d, i) => {
    const v = pick(d);
    if (v === null) segs.push([]);
    else segs[segs.length - 1]!.push(`${r1(x(i))},${r1(y(v))}`);
  });
  return segs.filter((s) => s.length > 0).map((s) => (s.length === 1 ? `${s[0]} ${s[0]}` : s.join(' ')));
}

export function gapChart(days: DayFigures[]): string {
  const h = 170;
  const max = Math.max(1, ...days.map((d) => d.rows ?? 0), ...days.map((d) => d.live ?? 0));
  const x = (i: number) => PAD.left + (i + 0.5) * ((W - PAD.left - PAD.right) / days.length);
  const y = (v: number) => PAD.top + (1 - v / max) * (h - PAD.top - PAD.bottom);
  const rows = lines(days, (d) => d.rows, x, y).map((p) => `<polyline points="${p}" fill="none" stroke="#57606a" stroke-width="2"/>`);
  const live = lines(days, (d) => d.live, x, y).map((p) => `<polyline points="${p}" fill="none" stroke="#1a7f37" stroke-width="2"/>`);
  const dots = days.flatMap((d, i) => (d.rows === null ? [] : [`<circle cx="${r1(x(i))}" cy="${r1(y(d.rows))}" r="2.5" fill="#57606a"><title>${esc(d.day)}: rows ${d.rows}, live ${d.live ?? '?'}</title></circle>`]));
  const recorded = days.some((d) => d.rows !== null);
  const note = recorded ? '' : `<text x="${W / 2}" y="${h / 2}" text-anchor="middle" font-size="12" fill="#57606a">no integrity run recorded in these 30 days</text>`;
  return `<svg class="chart" viewBox="0 0 ${W} ${h}" width="${W}" height="${h}" role="img" aria-label="rows and live rows, last 30 days" xmlns="http://www.w3.org/2000/svg">
<title>rows (grey) and live rows (green), last 30 days</title>${axis(h, max, days)}${rows.join('')}${live.join('')}${dots.join('')}${note}</svg>`;
}

export function activityChart(days: DayFigures[]): string {
  const h = 130;
  const max = Math.max(1, ...days.flatMap((d) => [d.pruned, d.newRows, d.flagged]));
  const slot = (W - PAD.left - PAD.right) / days.length;
  const bw = Math.max(1, (slot - 2) / SERIES.length);
  const y = (v: number) => PAD.top + (1 - v / max) * (h - PAD.top - PAD.bottom);
  const bars = days.flatMap((d, i) =>
    SERIES.filter((s) => d[s.key] > 0).map((s) => {
      const j = SERIES.indexOf(s);
      const top = r1(y(d[s.key]));
      return `<rect x="${r1(PAD.left + i * slot + 1 + j * bw)}" y="${top}" width="${r1(bw)}" height="${r1(y(0) - top)}" fill="${s.colour}"><title>${esc(d.day)}: ${s.label} ${d[s.key]}</title></rect>`;
    }),
  );
  return `<svg class="chart" viewBox="0 0 ${W} ${h}" width="${W}" height="${h}" role="img" aria-label="rows pruned, new and flagged per day, last 30 days" xmlns="http://www.w3.org/2000/svg">
<title>per day: pruned (grey), new (blue), flagged (red)</title>${axis(h, max, days)}${bars.join('')}</svg>`;
}

export function legend(): string {
  const item = (colour: string, label: string) => `<span class="key"><svg width="10" height="10" aria-hidden="true"><rect width="10" height="10" fill="${colour}"/></svg> ${label}</span>`;
  return `<p class="legend">${item('#57606a', 'rows')}${item('#1a7f37', 'live rows')}${SERIES.map((s) => item(s.colour, s.label)).join('')}</p>`;
}
