/**
 * Values that came from the environment (`${VAR}` in config or in a verifier rule) are secrets: a token in a
 * verifier URL, a header, a git URL, REDIS_URL, SMTP and Qdrant credentials. They are remembered here when config
 * and rules are expanded, and every record and output (drift evidence and errors, job records, log lines) passes
 * through `redactSecrets`, which puts `${NAME}` back where such a value, or an encoded form of it, appears.
 *
 * Process-wide on purpose: a value must stay hidden whichever code path prints it, and the logger exists before
 * the rules are compiled. The set only grows.
 */

/** Shorter values (a port, a flag) cannot be told apart from ordinary text; they are left alone. */
export const MIN_SECRET_LENGTH = 4;

interface Secret {
  name: string;
  value: string;
}

const secrets = new Map<string, Secret>();
let pattern: RegExp | null = null;
let names: string[] = [];

const escapeRegex = (s: string) => s.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');

/** One character as written, percent-encoded (either case of hex), form-encoded or JSON-escaped. */
function charForms(c: string): string {
  const forms = new Set([escapeRegex(c)]);
  if (!/[A-Za-z0-9_.~-]/.test(c)) {
    const pct = [...Buffer.from(c, 'utf8')].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');
    forms.add(pct.replace(/[a-f]/g, (h) => `[${h}${h.toUpperCase()}]`));
  }
  if (c === ' ') forms.add('\\+');
  const json = JSON.stringify(c).slice(1, -1);
  if (json !== c) forms.add(escapeRegex(json));
  // JSON as PHP and others write it (`\/`), and a backslash as a URL parser reads it (`/`, in http and file URLs).
  if (c === '/') forms.add(escapeRegex('\\/'));
  if (c === '\\') forms.add('/');
  return forms.size === 1 ? [...forms][0]! : `(?:${[...forms].join('|')})`;
}

/**
 * The part of base64 that is the same wherever the value sits in the encoded text (a Basic auth header encodes
 * `user:value`): for each of the three alignments, the characters that depend on the value's bytes alone.
 */
function base64Cores(value: string): string[] {
  const bytes = Buffer.from(value, 'utf8');
  const out: string[] = [];
  for (let k = 0; k < 3; k++) {
    const b64 = Buffer.concat([Buffer.alloc(k), bytes]).toString('base64');
    const start = k === 0 ? 0 : 4;
    const end = Math.floor((k + bytes.length) / 3) * 4;
    const core = b64.slice(start, end);
    if (core.length >= 8) out.push(core, core.replace(/\+/g, '-').replace(/\//g, '_'));
  }
  return out;
}

function build(): void {
  const list = [...secrets.values()].sort((a, b) => b.value.length - a.value.length);
  const alternatives: string[] = [];
  names = [];
  for (const s of list) {
    const hex = Buffer.from(s.value, 'utf8').toString('hex');
    const forms = [[...s.value].map(charForms).join(''), ...base64Cores(s.value).map(escapeRegex), hex, hex.toUpperCase()];
    alternatives.push(`(${forms.join('|')})`);
    names.push(s.name);
  }
  pattern = alternatives.length > 0 ? new RegExp(alternatives.join('|'), 'g') : null;
}

/**
 * A local file or folder path (`/var/lib/…`, `~/.mem0`, `./backups`): where a file is, not a secret. Every error
 * about a file names it (a user must see which file), so a path that came from the environment into a field that
 * names a file or folder (`pathField`) is not hidden. Anywhere else the same shape is a secret like any other: a
 * token can begin with `/` (one base64 token in 64 does), and a verifier rule's URL or header is no file. A URL,
 * or anything with userinfo, is a secret in any field.
 */
const LOCAL_PATH = /^(?:\/|~\/|\.\.?\/)[^\s:@?#]*$/;

/**
 * Remember a value read from the environment variable `name` (called wherever `${NAME}` is expanded); `pathField`:
 * it was expanded into a config field that names a file or folder.
 */
export function rememberSecret(name: string, value: string, pathField = false): void {
  if (value.length < MIN_SECRET_LENGTH || (pathField && LOCAL_PATH.test(value)) || secrets.has(value)) return;
  secrets.set(value, { name, value });
  build();
}

/** `text` with every remembered value (and its percent-, JSON- or base64-encoded forms) replaced by `${NAME}`. */
export function redactText(text: string): string {
  if (!pattern) return text;
  return text.replace(pattern, (...m: unknown[]) => {
    const groups = m.slice(1, names.length + 1);
    const i = groups.findIndex((g) => g !== undefined);
    return `\${${names[i] ?? 'SECRET'}}`;
  });
}

/** A copy of `value` with every string in it redacted (keys included); anything else is kept as it is. */
export function redactSecrets<T>(value: T, depth = 0, seen = new WeakSet<object>()): T {
  if (typeof value === 'string') return redactText(value) as T;
  if (!pattern || !value || typeof value !== 'object' || depth > 12 || seen.has(value)) return value;
  seen.add(value);
  if (Array.isArray(value)) return value.map((v) => redactSecrets(v, depth + 1, seen)) as T;
  if (value instanceof Error) {
    const e = new Error(redactText(value.message)) as Error & Record<string, unknown>;
    e.name = value.name;
    if (value.stack) e.stack = redactText(value.stack);
    for (const key of Object.keys(value)) e[key] = redactSecrets((value as unknown as Record<string, unknown>)[key], depth + 1, seen);
    return e as T;
  }
  const proto = Object.getPrototypeOf(value) as object | null;
  if (proto !== Object.prototype && proto !== null) return value; // class instances (Buffers, Dates) are not text
  const copy: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) copy[redactText(k)] = redactSecrets(v, depth + 1, seen);
  return copy as T;
}

/** Any secrets known? (Cheap check for hot paths.) */
export const hasSecrets = (): boolean => pattern !== null;
