/**
 * A small JSON-path selector for config files and JSON bodies: `$.database.version`, `$.servers[0].host`,
 * `$['key.with.dots']`, or without the `$.` (`database.version`, `DATABASE_URL` for a .env file).
 * No wildcards, filters or recursion: a rule names one value.
 */
export type Step = string | number;

const STEP = /^(?:\.([A-Za-z_$][\w$-]*)|\[(\d+)\]|\[\s*'((?:[^'\\]|\\.)*)'\s*\]|\[\s*"((?:[^"\\]|\\.)*)"\s*\])/;

export function parseSelector(selector: string): Step[] {
  let rest = selector.trim();
  if (rest === '$' || rest === '') return [];
  if (rest.startsWith('$')) rest = rest.slice(1);
  else if (!rest.startsWith('[') && !rest.startsWith('.')) rest = '.' + rest;
  const steps: Step[] = [];
  while (rest.length > 0) {
    const m = STEP.exec(rest);
    if (!m) throw new Error(`selector ${JSON.stringify(selector)}: cannot read "${rest.slice(0, 20)}"`);
    if (m[1] !== undefined) steps.push(m[1]);
    else if (m[2] !== undefined) steps.push(Number(m[2]));
    else steps.push((m[3] ?? m[4] ?? '').replace(/\\(.)/g, '$1'));
    rest = rest.slice(m[0].length);
  }
  return steps;
}

/** The selected value, or `undefined` when the path does not exist. Own properties only. */
export function select(root: unknown, selector: string): unknown {
  let cur: unknown = root;
  for (const step of parseSelector(selector)) {
    if (cur === null || typeof cur !== 'object') return undefined;
    if (typeof step === 'number') {
      if (!Array.isArray(cur)) return undefined;
      cur = cur[step];
    } else {
      if (!Object.prototype.hasOwnProperty.call(cur, step)) return undefined;
      cur = (cur as Record<string, unknown>)[step];
    }
  }
  return cur;
}
