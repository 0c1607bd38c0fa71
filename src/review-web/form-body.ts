import type { Context, MiddlewareHandler } from 'hono';
import type { ReviewSite } from './site.js';

/**
 * The largest form the page draws, as a browser sends it: a supersede's fact (10,000 characters) and source (2,000),
 * each character up to 9 bytes once form-encoded, and the memory id as encodeFormId writes it (long ids exist).
 */
export const MAX_FORM_BYTES = 256 * 1024;

/**
 * A request's body is read whole before any route looks at it, at most MAX_FORM_BYTES (more is 413, by its
 * Content-Length or as it arrives). A body cut short or abandoned (the client stopped sending, or the server's
 * request timeout ended it) is the client's doing: a 400 with a short page and a warning, never a 500.
 */
export function formBody(site: ReviewSite): MiddlewareHandler {
  return async (c, next) => {
    const body = c.req.raw.body;
    if (!body) return next();
    if (Number(c.req.header('content-length') ?? 0) > MAX_FORM_BYTES) return tooLarge(c, site);
    let bytes: Uint8Array | 'too large';
    try {
      bytes = await readUpTo(body, MAX_FORM_BYTES);
    } catch (err) {
      return unreadable(c, site, err);
    }
    if (bytes === 'too large') return tooLarge(c, site);
    c.req.raw = new Request(c.req.raw, { body: bytes });
    return next();
  };
}

/** The fields of the form a POST carries (files dropped), or the 400 page when it cannot be read as a form. */
export async function readForm(c: Context, site: ReviewSite): Promise<Record<string, string> | Response> {
  try {
    const form = await c.req.parseBody();
    return Object.fromEntries(Object.entries(form).filter((e): e is [string, string] => typeof e[1] === 'string'));
  } catch (err) {
    return unreadable(c, site, err); // a multipart body without its closing boundary, a garbled one
  }
}

function unreadable(c: Context, site: ReviewSite, err: unknown): Response {
  site.log.warn({ path: c.req.path, reason: String((err as Error)?.message ?? err).slice(0, 200) }, 'review page: unreadable request body');
  return site.message(c, 400, 'Form not readable', 'That form arrived cut short or garbled, so it could not be read. Nothing changed.');
}

const tooLarge = (c: Context, site: ReviewSite) => site.message(c, 413, 'Too large', 'That form was too large. Nothing changed.');

async function readUpTo(body: ReadableStream<Uint8Array>, max: number): Promise<Uint8Array | 'too large'> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > max) {
      await reader.cancel().catch(() => undefined);
      return 'too large';
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks, size);
}
