/**
 * Credentials do not belong in a memory store, and never in an email or a terminal scrollback. Two layers find
 * them: secretlint's recommended preset (@secretlint/secretlint-rule-preset-recommend, the catalogue maintained
 * for secret scanning; 11.x, the last line for Node 20: AWS, GCP, GitHub, Slack, npm, OpenAI, Anthropic, SendGrid,
 * private keys, basic-auth URLs, database connection strings, …), asynchronous, and the generic forms below that a
 * scanner of files leaves out or only reports in context (passwords in URLs, `?token=` parameters, `password=`
 * and `Authorization:` lines, JWTs, PEM/PGP blocks, GitLab/Stripe/Google and other bare token formats),
 * synchronous so every render can apply them.
 * A masked value keeps at most its public prefix (`ghp_`, `AKIA`, `xoxb-`): never a character of the secret.
 */
import type { SecretLintCoreConfig } from '@secretlint/types';
import { readings, type Reading } from './secret-readings.js';

// Prefixes that say what kind of token it was and are the same in every token of that kind.
const PUBLIC_PREFIX = /^(?:github_pat_|gh[pousr]_|glpat-|gl[a-z]{2,6}-|xox[a-z]-|xapp-|AKIA|ASIA|AIza|ya29\.|sk-ant-|sk-proj-|sk-|[sr]k_(?:live|test)_|npm_|hf_|SG\.|eyJ|shp(?:at|ss|ca|pa)_|lin_api_|pypi-|hv[sbr]\.|do[por]_v1_|GOCSPX-|AGE-SECRET-KEY-|gsk_|xai-|tskey-|PMAK-|sntry[su]_|glsa_|dapi|figd_|sbp_)/;

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

/** Every place the secret values occur in the text. */
function spansOfValues(text: string, values: string[]): Span[] {
  const spans: Span[] = [];
  for (const v of values) for (let i = text.indexOf(v); i >= 0; i = text.indexOf(v, i + v.length)) spans.push([i, i + v.length]);
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
function maskReadings(raw: string, form: string, views: Reading[], extra: Span[] = []): string {
  const spans = [...extra, ...genericSpans(form)];
  for (const r of views) spans.push(...inText(r, genericSpans(r.text)));
  return spans.length === 0 ? raw : applySpans(form, spans);
}

/** The generic rules only: synchronous, for every string a render shows. */
export function maskSecretsSync(text: unknown): string {
  const raw = String(text ?? '');
  const form = maskingForm(raw);
  return maskReadings(raw, form, readings(form));
}

// Loaded on first use: most commands never show store text, and need not pay for the catalogue at start.
let catalogue: Promise<{ lintSource: typeof import('@secretlint/core').lintSource; config: SecretLintCoreConfig }> | undefined;

/**
 * Starts loading the catalogue now, for a caller that knows it will mask and has a wait to fill first (the digest,
 * while the store thread reads the review queue). Its failure is the first maskSecrets' to report.
 */
export function preloadCatalogue(): void {
  loadCatalogue().catch(() => {});
}

function loadCatalogue() {
  catalogue ??= Promise.all([
    import('@secretlint/core'),
    import('@secretlint/secretlint-rule-preset-recommend'),
    import('@secretlint/profiler'),
  ]).then(([core, preset, profiler]) => {
    // secretlint's core always profiles: every run leaves performance marks in the process-wide timeline and in
    // its profiler, never dropped, and measuring looks marks up by name. In a worker masking thousands of strings
    // a day that is memory without end, and a digest of 250 rows blocked the event loop for seconds. Nothing here
    // reads the profile; core only ever calls `mark`, so it marks nothing.
    profiler.secretLintProfiler.mark = () => {};
    return {
      lintSource: core.lintSource,
      config: {
        rules: [
          {
            id: '@secretlint/secretlint-rule-preset-recommend',
            rule: preset.creator,
            // Bare AWS access key ids too, not only `aws_secret_access_key = …` lines.
            rules: [{ id: '@secretlint/secretlint-rule-aws', options: { enableIDScanRule: true } }],
          },
        ],
      },
    };
  });
  return catalogue;
}

/**
 * The secret values the catalogue finds in the text. A rule's report carries the value in its `data` (a rule's
 * `range` is not always the value's own: the AWS rule's starts at the key name), else the range is the value.
 */
async function catalogueFinds(text: string): Promise<string[]> {
  const { lintSource, config } = await loadCatalogue();
  const result = await lintSource({
    source: { content: text, filePath: 'memory.txt', contentType: 'text' },
    options: { config, noPhysicFilePath: true },
  });
  const found = new Set<string>();
  for (const m of result.messages) {
    const values = Object.values(m.data ?? {}).filter((v): v is string => typeof v === 'string' && v.length >= 6 && text.includes(v));
    if (values.length > 0) values.forEach((v) => found.add(v));
    else found.add(text.slice(m.range[0], m.range[1]));
  }
  // Longest first, so a value that contains another is masked whole.
  return [...found].filter((v) => v.trim() !== '').sort((x, y) => y.length - x.length);
}

/** Both layers: every occurrence of what the catalogue finds, in the text and in each reading of it, and the generic rules. */
export async function maskSecrets(text: unknown): Promise<string> {
  const raw = String(text ?? '');
  const form = maskingForm(raw);
  // No token of the catalogue is this short (verdicts, counts), and every one of its patterns has a letter in it
  // (a prefix, a scheme, a key name): text without one (times, numbers) needs the generic rules only.
  if (form.trim().length < 12 || !/[A-Za-z]/.test(form)) return maskSecretsSync(raw);
  const views = readings(form);
  const found = spansOfValues(form, await catalogueFinds(form));
  for (const r of views) found.push(...inText(r, spansOfValues(r.text, await catalogueFinds(r.text))));
  return maskReadings(raw, form, views, found);
}

/**
 * Every string in a value, masked, except under the keys named (ids a person must be able to type back).
 * For a whole digest model or review list before it is shown. `memo` (one caller's, for one model) remembers each
 * string's mask: what was masked ahead, while the caller waited on something else, is not linted again.
 */
export async function maskDeep<T>(value: T, keep: ReadonlySet<string> = new Set(), memo?: Map<string, Promise<string>>): Promise<T> {
  if (typeof value === 'string') {
    if (!memo) return (await maskSecrets(value)) as T;
    let masked = memo.get(value);
    if (!masked) memo.set(value, (masked = maskSecrets(value)));
    return (await masked) as T;
  }
  if (Array.isArray(value)) return (await Promise.all(value.map((v) => maskDeep(v, keep, memo)))) as T;
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = keep.has(k) ? v : await maskDeep(v, keep, memo);
  return out as T;
}
