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

export function createTransport(smtp: SmtpConfig) {
  return nodemailer.createTransport({
    host: smtp.host,
    port: smtp.port,
    secure: smtp.secure,
    ...(smtp.user ? { auth: { user: smtp.user, pass: smtp.password ?? '' } } : {}),
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
  const e = err as { code?: string; responseCode?: number; permanent?: boolean; message?: string };
  const what = `send digest via ${cfg.smtp.host}:${cfg.smtp.port}`;
  const detail = headerText(e.message ?? String(err), 300);
  if (e.code === 'EAUTH') return configError(`smtp.user/smtp.password: ${what}: the server refused the login: ${detail}`);
  if (e.code === 'ENOAUTH') return configError(`smtp.user: ${what}: the server requires a login: ${detail}`);
  if (e.code === 'EENVELOPE' && e.permanent === true) return configError(`digest.to: ${what}: the server refused the recipients: ${detail}`);
  if (e.code === 'ETLS') return configError(`smtp.secure: ${what}: TLS failed (is smtp.secure right for port ${cfg.smtp.port}?): ${detail}`);
  return transientError(`${what}: ${detail}`, err);
}
