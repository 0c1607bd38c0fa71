import { z } from '../vendor/zod.js';
import { timerDuration } from '../time/timer-duration.js';
import { secretField } from '../config/secret-fields.js';

export const smtpSchema = z.strictObject({
  host: z.string().min(1).describe('SMTP server; needed only to send the digest (`digest --preview` needs none).'),
  port: z.number().int().min(1).max(65535).default(587)
    .describe('SMTP port: 587 (STARTTLS) or 465 (with `secure: true`).'),
  secure: z.boolean().default(false)
    .describe('true: TLS from the start (port 465); false: STARTTLS, which the server must offer when user and password are set (see allowPlaintextAuth).'),
  user: z.string().optional().describe('SMTP user; user and password go together.'),
  password: secretField().optional().describe('From the environment only: `password: ${SMTP_PASSWORD}`.'),
  allowPlaintextAuth: z.boolean().default(false)
    .describe('true: send user and password to a server that offers no STARTTLS, in clear text (a relay on the same machine). Without it such a send fails, naming this setting.'),
  timeoutMs: timerDuration('ms').int().positive().default(30_000)
    .describe('Connect, greeting and socket timeouts; past them the send fails transiently (retried).'),
});

/** A case-insensitive regular expression from config; a bad one is a config error naming its field. */
const pattern = z.string().min(1).refine((p) => {
  try {
    new RegExp(p, 'iu');
    return true;
  } catch {
    return false;
  }
}, 'not a valid regular expression');

const labelled = z.strictObject({
  pattern: pattern.describe('A case-insensitive regular expression.'),
  label: z.string().min(1).describe('The reason shown beside a flagged row.'),
});
export type LabelledPattern = z.infer<typeof labelled>;

/**
 * Sources that are tool output (fetched pages, files, issue comments, command output): the memory-poisoning path
 * of BRIEF.md. Matched against `source`, case-insensitively.
 */
export const DEFAULT_TOOL_SOURCES: LabelledPattern[] = [
  { pattern: String.raw`\b(https?|ftp)://|\bwww\.|\b(fetch(ed)?|web ?page|web ?search|browser|scrape[dr]?|url)\b`, label: 'fetched page' },
  { pattern: String.raw`\b(tool|tool[_ -]?(call|result|output)|function[_ -]?(call|result))\b`, label: 'tool output' },
  { pattern: String.raw`\b(file|read_file|attachment|document|pdf)\b|^/|\.(md|txt|json|ya?ml|toml|csv|log|html?)\b`, label: 'file content' },
  { pattern: String.raw`\b(issue|comment|pull request|merge request|pr|ticket|email|e-mail)\b`, label: 'issue or comment' },
  { pattern: String.raw`\b(command|cmd|shell|bash|exec|stdout|stderr|terminal|output)\b`, label: 'command output' },
];

/** Facts that read like a standing instruction rather than a fact. Matched against `fact` and `subject`. */
export const DEFAULT_INSTRUCTIONS: LabelledPattern[] = [
  { pattern: String.raw`\bignore (all |any )?(previous|prior|above|earlier)\b`, label: 'ignore previous' },
  { pattern: String.raw`\b(with|without) (the )?(checks?|tests?|review|verification|approval)s? (disabled|off|skipped)|\b(disable|skip|bypass) (the )?(checks?|tests?|review|verification|approval|ci|hooks?)\b|--no-verify|--force\b`, label: 'disables checks' },
  { pattern: String.raw`\b(always|never)\b`, label: 'always/never' },
  { pattern: String.raw`\b(from now on|in (all )?future|every time|do not ask|don'?t ask|without asking|you must|you should|you are (now )?)\b`, label: 'standing order' },
  { pattern: String.raw`\b(system prompt|instructions?|jailbreak)\b`, label: 'talks about instructions' },
];

/** Credentials do not belong in a memory store (BRIEF.md, memory poisoning): flag anything that looks like one. */
export const DEFAULT_SECRETS: LabelledPattern[] = [
  { pattern: String.raw`\b(password|passwd|api[_ -]?key|secret|token|private key|bearer)\b\s*[:=]|-----BEGIN [A-Z ]*PRIVATE KEY|\b(sk|pk|ghp|gho|xox[bp])[-_][A-Za-z0-9_-]{12,}|\bAKIA[0-9A-Z]{16}\b`, label: 'looks like a credential' },
];

export const digestSchema = z.strictObject({
  from: z.string().default('memory-warden <memory-warden@localhost>').describe('The digest\'s From address.'),
  to: z.array(z.string().regex(/^[^\s<>@,;"\\]+@[^\s<>@,;"\\]+$|^[^<>\r\n]*<[^\s<>@,;"\\]+@[^\s<>@,;"\\]+>$/, 'an email address (name@host or Name <name@host>)')).default([])
    .describe('Recipients of the daily digest (name@host or Name <name@host>).'),
  perStore: z.boolean().default(false).describe('One email covering every store, or one per store.'),
  allQuiet: z.boolean().default(true).describe('Send a short "all quiet" email when nothing is new anywhere.'),
  maxRows: z.number().int().positive().default(200).describe('New rows listed in full per store; the rest are counted.'),
  subject: z.string().default('memory-warden digest').describe('Subject prefix.'),
  firstPeriodHours: z.number().positive().default(24)
    .describe('The first digest (no earlier one sent) covers this many hours back.'),
  settleSeconds: z.number().int().nonnegative().default(60)
    .describe('The period ends this many seconds before "now", so a row whose created_at was stamped just before the digest read but committed just after still falls into the next period instead of none.'),
  claimMinutes: z.number().positive().default(15)
    .describe('A claimed digest whose sender vanished (crash) may be taken over after this many minutes.'),
  hostTimeoutSeconds: timerDuration('seconds').positive().default(120)
    .describe('A fleet (stores on several hosts): how long the digest waits for each other host\'s sections. A host that has not answered by then gets a section saying "no report from host X since …"; the digest goes out anyway.'),
  lookTwice: z
    .strictObject({
      sources: z.array(labelled).default(DEFAULT_TOOL_SOURCES)
        .describe('Sources that are tool output. Replaces the defaults when given.'),
      instructions: z.array(labelled).default(DEFAULT_INSTRUCTIONS)
        .describe('Facts that read like standing instructions. Replaces the defaults when given.'),
      secrets: z.array(labelled).default(DEFAULT_SECRETS).describe('Facts that look like credentials.'),
    })
    .prefault({}),
});

export type SmtpConfig = z.infer<typeof smtpSchema>;
export type DigestConfig = z.infer<typeof digestSchema>;
