/**
 * Credentials do not belong in a memory store, and never in an email or a terminal scrollback. This file is the one
 * catalogue of what a credential looks like, owned here and tested against one sample of each kind
 * (test/credentials.test.ts): every kind secretlint's recommended preset finds (AWS, GCP, GitHub, Slack, npm, OpenAI,
 * Anthropic, Linear, SendGrid, Shopify, 1Password, private keys, basic-auth URLs, database connection strings) and
 * the generic forms a file scanner leaves out or only reports in context (passwords in URLs, `?token=` parameters,
 * `password=` and `Authorization:` lines, JWTs, PEM/PGP blocks, GitLab/Stripe/Google and other bare token formats).
 * Synchronous, so every render can apply it.
 * A masked value keeps at most its public prefix (`ghp_`, `AKIA`, `xoxb-`): never a character of the secret.
 */
import { readings, type Reading } from './secret-readings.js';

// Prefixes that say what kind of token it was and are the same in every token of that kind.
const PUBLIC_PREFIX = /^(?:ops_|github_pat_|gh[pousr]_|glpat-|gl[a-z]{2,6}-|xox[a-z]-|xapp-|AKIA|ASIA|AIza|ya29\.|sk-ant-|sk-proj-|sk-|[sr]k_(?:live|test)_|npm_|hf_|SG\.|eyJ|shp(?:at|ss|ca|pa)_|lin_api_|pypi-|hv[sbr]\.|do[por]_v1_|GOCSPX-|AGE-SECRET-KEY-|gsk_|xai-|tskey-|PMAK-|sntry[su]_|glsa_|dapi|figd_|sbp_)/;

/** The mask of one secret value. */
export function maskValue(value: string): string {
  const prefix = PUBLIC_PREFIX.exec(value)?.[0];
  return prefix ? `${prefix}…[masked]` : '[masked]';
}

// Each rule masks its capture group (or the whole match when it has none). Quotes may come escaped (`\"`):
// drift evidence and job results are JSON inside text.
const GENERIC: RegExp[] = [
  // PEM and PGP private key blocks, to their END line or the end of the text (a clipped key is still a key).
  /-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|$)/g,
  // Password in a URL's userinfo: postgres://user:PASS@host, https://:TOKEN@host.
  /(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*:\/\/[^\s:/?#@]*:([^\s/?#@]+)@/gi,
  // Credentials in query parameters: ?api_key=…, &token=…, &X-Amz-Signature=…
  /[?&;][\w.-]*?(?:key|token|secret|password|passwd|pwd|signature|sig|credential|auth)[\w.-]*=([^&\s#"'<>]+)/gi,
  // `Authorization: Bearer …`, `Authorization: Basic …`, `Proxy-Authorization: …`, a bare `Bearer …`.
  /\bauthorization(?:\\?["'])?(?:\s*[:=]\s*|%3A(?:%20)*)(?:\\?["'])?(?:[A-Za-z]+(?:\s+|%20))?([^\s"'\\,;]{4,})/gi,
  /\bbearer(?:\s+|%20|\+)([A-Za-z0-9._~+/-]{8,}=*)/gi,
  // Assignments: password=…, aws_secret_access_key = …, "apiKey": "…", client-secret: …
  // (The name starts at a word start, tried once per word: a long run of word characters stays linear.)
  /(?<![\w.-])[\w.-]*?(?:password|passwd|pwd|secret|api[_-]?key|apikey|access[_-]?key|private[_-]?key|token|credentials?)(?:[_-]?(?:access[_-]?)?(?:key|id|value|token|string))?(?:\\?["'])?\s*(?:=>|[:=])\s*(?:\\?["'])?([^\s"'\\,;]{4,})/gi,
  // JWTs (header.payload.signature, base64url JSON).
  /eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*/g,
  // Token formats that need no context: cloud keys, forge and chat tokens, AI and payment API keys. Their prefixes
  // are distinctive enough to be looked for inside a word too (`token_sk-proj-…`, `xAKIA…`, `1sk_live_…`): a
  // secret glued to other text is still the secret. Only the short generic `sk-`/`pk-` form needs no letter or
  // digit before it (`risk-assessment-framework` is no key).
  /(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Z0-9])/g,
  /AIza[0-9A-Za-z_-]{35}/g,
  /ya29\.[0-9A-Za-z_-]{20,}/g,
  /(?:github_pat_[A-Za-z0-9_]{20,}|gh[pousr]_[A-Za-z0-9]{20,})/g,
  /gl(?:pat|dt|ptt|rt|cbt|ft|oas|imt|soat|agent|sa|c)[-_][A-Za-z0-9_-]{20,}/g,
  /xox[abposre]-[A-Za-z0-9-]{10,}/g,
  /hooks\.slack\.com\/services\/[A-Za-z0-9/]+/g,
  /(?:sk-(?:ant|proj|svcacct|admin)-|[spr]k_(?:live|test)_)[A-Za-z0-9_-]{12,}/g,
  /(?<![A-Za-z0-9])(?:sk|pk|rk)[-_][A-Za-z0-9_-]{12,}/g,
  /(?:npm|hf)_[A-Za-z0-9]{30,}/g,
  /SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}/g,
  // More of the same kind: Shopify, Linear, PyPI, Vault, DigitalOcean, Google OAuth client secrets, age identities,
  // Groq, xAI, Tailscale, Postman, Sentry, Grafana, Databricks, Figma, Supabase; Telegram bot tokens.
  /(?:shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}|lin_api_[A-Za-z0-9]{32,}|pypi-AgE[A-Za-z0-9_-]{32,}|hv[sbr]\.[A-Za-z0-9_-]{24,}|do[por]_v1_[a-f0-9]{32,})/g,
  /(?:GOCSPX-[A-Za-z0-9_-]{20,}|AGE-SECRET-KEY-1[0-9A-Z]{40,}|gsk_[A-Za-z0-9]{32,}|xai-[A-Za-z0-9]{32,}|tskey-[a-z]+-[A-Za-z0-9-]{16,})/g,
  /(?:PMAK-[a-f0-9]{24}-[a-f0-9]{34}|sntry[su]_[A-Za-z0-9+/=_-]{32,}|dapi[a-f0-9]{32}|figd_[A-Za-z0-9_-]{32,}|sbp_[a-f0-9]{40})/g,
  /\d{8,10}:AA[A-Za-z0-9_-]{32,}/g,
  // 1Password service account tokens (`ops_` and base64 JSON); npm's `_authToken=` lines are assignments above.
  /ops_eyJ[A-Za-z0-9+/=_-]{40,}/g,
  // A password without a scheme's `//`: `admin:Hunter2@db.internal:5432`, `curl -u admin:Hunter2`.
  /(?<![\w.+-])(?!(?:mailto|sips?|xmpp|tel|im|pres):)[\w.+-]+:([^\s:/?#@"'<>]{6,})@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*(?::\d+)?/gi,
  /(?:^|\s)(?:-u|--user)\s+[^\s:]+:(\S{4,})/g,
  // `pass=…`, `pw: …`, `passphrase = …` (whole names only: `bypass=1` is no password), cookies, PuTTY keys.
  /(?<![\w.-])(?:pass|pw|passphrase|pin)(?:\\?["'])?\s*(?:=>|[:=])\s*(?:\\?["'])?([^\s"'\\,;]{4,})/gi,
  /\b(?:set-)?cookie(?:\\?["'])?\s*[:=]\s*(?:\\?["'])?([^\r\n"'\\]{4,})/gi,
  /PuTTY-User-Key-File-\d+:[\s\S]*?(?:Private-MAC:\s*[0-9a-fA-F]+|$)/g,
];

// Characters that render as nothing (default-ignorable code points, format characters) between two others: they
// split a token so that no pattern sees it (`gh\u200Bp_…`, `passwd\u200B=…`).
const HIDDEN_INSIDE = /(?<=\S)[\p{Default_Ignorable_Code_Point}\p{Cf}]+(?=\S)/gu;

/**
 * The text as masking reads it: NFKC (fullwidth `ｓｈｐａｔ＿` is `shpat_`, as a person reads it) and no hidden
 * character inside a run of visible ones.
 */
export function maskingForm(text: string): string {
  return text.normalize('NFKC').replace(HIDDEN_INSIDE, '');
}

/** A range [start, end) of a text that holds a secret. */
type Span = readonly [number, number];

const GENERIC_WITH_INDICES = GENERIC.map((re) => new RegExp(re.source, `${re.flags}d`));

/** Where the generic rules find secrets: each rule's capture group (the value), or its whole match. */
function genericSpans(text: string): Span[] {
  const spans: Span[] = [];
  for (const re of GENERIC_WITH_INDICES) {
    for (const m of text.matchAll(re)) {
      const at = m.indices?.[1] ?? m.indices![0]!;
      if (at[1] > at[0]) spans.push(at);
    }
  }
  return spans;
}

/** Spans found in a reading, as ranges of the text it reads (a decoded secret covers all it was decoded from). */
const inText = (r: Reading, spans: Span[]): Span[] => spans.map(([a, b]) => [r.start[a]!, r.end[b - 1]!] as const);

/** The text with each span (overlapping and touching ones merged) replaced by its mask. */
function applySpans(text: string, spans: Span[]): string {
  const sorted = [...spans].sort((x, y) => x[0] - y[0]);
  let out = '';
  let at = 0;
  for (let i = 0; i < sorted.length; ) {
    let [start, end] = sorted[i]!;
    for (i++; i < sorted.length && sorted[i]![0] <= end; i++) end = Math.max(end, sorted[i]![1]);
    out += text.slice(at, start) + maskValue(text.slice(start, end));
    at = end;
  }
  return out + text.slice(at);
}

/**
 * The one masking of text a person sees. The text unchanged when masking finds nothing in its masking form nor in
 * any reading of it (lines joined, encodings undone: secret-readings.ts); else that form, with every secret found
 * masked where it is written (a secret spelled in fullwidth, split by an invisible character or a line break,
 * percent-, entity-, JSON-, base64- or hex-encoded is shown as what it is, masked, its tail with it).
 */
function maskReadings(raw: string, form: string, views: Reading[]): string {
  const spans = genericSpans(form);
  for (const r of views) spans.push(...inText(r, genericSpans(r.text)));
  return spans.length === 0 ? raw : applySpans(form, spans);
}

/** Every secret in the text masked, found in the text as a person reads it and in every reading of it. */
export function maskSecretsSync(text: unknown): string {
  const raw = String(text ?? '');
  const form = maskingForm(raw);
  return maskReadings(raw, form, readings(form));
}

/**
 * Every string in a value, masked, except under the keys named (ids a person must be able to type back).
 * For a whole digest model or review list before it is shown. `memo` (one caller's, for one model) remembers each
 * string's mask: what was masked ahead, while the caller waited on something else, is not linted again.
 */
export async function maskDeep<T>(value: T, keep: ReadonlySet<string> = new Set(), memo?: Map<string, Promise<string>>): Promise<T> {
  if (typeof value === 'string') {
    if (!memo) return maskSecretsSync(value) as T;
    let masked = memo.get(value);
    if (!masked) memo.set(value, (masked = Promise.resolve(maskSecretsSync(value))));
    return (await masked) as T;
  }
  if (Array.isArray(value)) return (await Promise.all(value.map((v) => maskDeep(v, keep, memo)))) as T;
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = keep.has(k) ? v : await maskDeep(v, keep, memo);
  return out as T;
}
