/**
 * Findings are values, not exceptions: a check returns them, the CLI prints them, the digest mails them and the
 * metrics count them. `ids` is capped (see ID_SAMPLE); `count` is always exact.
 */
export type Severity = 'error' | 'warning' | 'info';

export interface Finding {
  code: string;
  severity: Severity;
  message: string;
  count?: number;
  ids?: string[];
}

export const ID_SAMPLE = 50;

export function finding(code: string, severity: Severity, message: string, ids?: readonly string[], count?: number): Finding {
  const f: Finding = { code, severity, message };
  if (ids) {
    f.count = count ?? ids.length;
    f.ids = ids.slice(0, ID_SAMPLE);
  } else if (count !== undefined) {
    f.count = count;
  }
  return f;
}

/** A problem is a finding that makes `check` exit 1; info findings are reported only. */
export const isProblem = (f: Finding) => f.severity !== 'info';
