import nodemailer from 'nodemailer';
import type { Config } from '../config/config.js';
import type { SmtpConfig } from './config.js';
import { configError, transientError, WardenError } from '../core/errors.js';
import { headerText } from './untrusted.js';
import { digestTimeZone, isTimeZone } from './deliveries.js';

/** What sending needs, checked once at start: a bad field is one error naming it, before anything is claimed. */
export interface SendConfig {
  smtp: SmtpConfig;
  from: string;
  to: string[];
}

export function checkSendConfig(config: Config): SendConfig {
  const { smtp, digest } = config;
  if (!smtp) throw configError('smtp: not configured; set smtp.host (and port, user, password) to send the digest, or use digest --preview');
  if (smtp.host.trim() === '' || /[\s/]/.test(smtp.host)) throw configError(`smtp.host: "${headerText(smtp.host, 80)}" is not a host name`);
  if (smtp.user !== undefined && (smtp.password === undefined || smtp.password === '')) {
    throw configError('smtp.password: required when smtp.user is set (from the environment: password: ${SMTP_PASSWORD})');
  }
  if (smtp.password !== undefined && (smtp.user === undefined || smtp.user === '')) throw configError('smtp.user: required when smtp.password is set');
  if (smtp.port === 465 && !smtp.secure) throw configError('smtp.secure: port 465 speaks TLS from the start; set secure: true (or use port 587 with STARTTLS)');
  const tz = digestTimeZone(config);
  if (!isTimeZone(tz)) {
    throw configError(`${config.worker.schedules.digest?.tz ? 'worker.schedules.digest.tz' : 'worker.timezone'}: "${headerText(tz, 80)}" is not an IANA time zone (e.g. UTC, Europe/Rome)`);
  }
  if (digest.to.length === 0) throw configError('digest.to: no recipients; list the addresses the digest goes to');
  if (!/@/.test(digest.from) || /[\r\n]/.test(digest.from)) throw configError(`digest.from: "${headerText(digest.from, 80)}" is not an email address`);
  return { smtp, from: digest.from, to: digest.to };
}

export type Transport = ReturnType<typeof createTransport>;

/**
 * Credentials travel encrypted or not at all: with `secure: false` and a user set, the server must offer STARTTLS
 * (requireTLS) unless `smtp.allowPlaintextAuth` says otherwise; and configured credentials are always used
 * (forceAuth), so a server that offers no login is an error naming them, not a send without them.
 */
export function createTransport(smtp: SmtpConfig) {
  return nodemailer.createTransport({
    host: smtp.host,
    port: smtp.port,
    secure: smtp.secure,
    ...(smtp.user ? { auth: { user: smtp.user, pass: smtp.password ?? '' }, forceAuth: true } : {}),
    ...(smtp.user && !smtp.secure && !smtp.allowPlaintextAuth ? { requireTLS: true } : {}),
    connectionTimeout: smtp.timeoutMs,
    greetingTimeout: smtp.timeoutMs,
    socketTimeout: smtp.timeoutMs,
    // The message is ours alone; nodemailer must never fetch a URL or read a file named inside it.
    disableFileAccess: true,
    disableUrlAccess: true,
  });
}

export interface DigestMessage {
  subject: string;
  text: string;
  html: string;
  messageId: string;
  period: { start: string; end: string };
}

export interface Accepted {
  response: string;
  accepted: string[];
}

/**
 * Send one digest. Resolves only when the server accepted the message (250 after DATA). Failures are sorted
 * once: a refused login or refused recipients will fail again the same way (config); everything else — no
 * connection, timeouts, 4xx, a server that hung up — is transient and the job is retried with backoff.
 */
export async function sendDigestMail(transport: Transport, cfg: SendConfig, msg: DigestMessage, signal?: AbortSignal): Promise<Accepted> {
  try {
    const info = await transport.sendMail({
      from: cfg.from,
      to: cfg.to,
      subject: headerText(msg.subject, 250),
      text: msg.text,
      html: msg.html,
      messageId: msg.messageId,
      headers: {
        'X-Memory-Warden-Period': `${msg.period.start.replace(' ', 'T')}Z/${msg.period.end.replace(' ', 'T')}Z`,
        'Auto-Submitted': 'auto-generated',
      },
      ...(signal ? { signal } : {}),
    } as Parameters<Transport['sendMail']>[0]);
    const accepted = ((info.accepted ?? []) as unknown[]).map((a) => (typeof a === 'string' ? a : String((a as { address?: unknown }).address)));
    if (accepted.length === 0) throw Object.assign(new Error(`no recipient accepted: ${String(info.response ?? '')}`), { code: 'EENVELOPE' });
    return { response: String(info.response ?? ''), accepted };
  } catch (err) {
    throw classifySmtpError(err, cfg);
  }
}

export function classifySmtpError(err: unknown, cfg: SendConfig): WardenError {
  if (err instanceof WardenError) return err;
  const e = err as { code?: string; command?: string; responseCode?: number; permanent?: boolean; message?: string };
  const what = `send digest via ${cfg.smtp.host}:${cfg.smtp.port}`;
  const detail = headerText(e.message ?? String(err), 300);
  const requiredTls = !!cfg.smtp.user && !cfg.smtp.secure && !cfg.smtp.allowPlaintextAuth;
  if (requiredTls && e.code === 'ETLS' && e.command === 'STARTTLS' && /^Error upgrading connection/.test(e.message ?? '')) {
    return configError(`smtp.allowPlaintextAuth: ${what}: the server offers no STARTTLS, and smtp.user and smtp.password are not sent in clear text; use TLS (secure: true on port 465, or a server that offers STARTTLS), or set smtp.allowPlaintextAuth: true for a server on a network you trust: ${detail}`);
  }
  // 500/502: AUTH unknown to the server; 503/504: not offered in this session, or no mechanism it implements.
  if (e.code === 'EAUTH' && e.responseCode !== undefined && [500, 502, 503, 504].includes(e.responseCode)) {
    return configError(`smtp.user/smtp.password: ${what}: the server offers no login (AUTH), so the configured credentials cannot be used; remove smtp.user and smtp.password for a server that takes mail without one: ${detail}`);
  }
  if (e.code === 'EAUTH') return configError(`smtp.user/smtp.password: ${what}: the server refused the login: ${detail}`);
  if (e.code === 'ENOAUTH') return configError(`smtp.user: ${what}: the server requires a login: ${detail}`);
  if (e.code === 'EENVELOPE' && e.permanent === true) return configError(`digest.to: ${what}: the server refused the recipients: ${detail}`);
  if (e.code === 'ETLS') return configError(`smtp.secure: ${what}: TLS failed (is smtp.secure right for port ${cfg.smtp.port}?): ${detail}`);
  return transientError(`${what}: ${detail}`, err);
}
