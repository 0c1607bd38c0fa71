/**
 * A memory id as a form carries it. Form submission rewrites text: the page's parser turns NUL into U+FFFD and
 * CR or CRLF into LF, the form encoder turns every LF into CRLF, and a lone surrogate cannot be sent at all. An id
 * written into the form as it is may come back as another id (or none). base64url survives all of that exactly:
 * of the id's UTF-8 when it is well-formed Unicode (`u…`), else of its UTF-16 code units (`w…`).
 */
export function encodeFormId(id: string): string {
  const utf8 = Buffer.from(id, 'utf8');
  return utf8.toString('utf8') === id ? `u${utf8.toString('base64url')}` : `w${Buffer.from(id, 'utf16le').toString('base64url')}`;
}

/** The id a form field names, or null when the field is not one `encodeFormId` wrote (damaged or made up). */
export function decodeFormId(field: string): string | null {
  const m = /^([uw])([A-Za-z0-9_-]*)$/.exec(field);
  if (!m) return null;
  const bytes = Buffer.from(m[2]!, 'base64url');
  if (bytes.toString('base64url') !== m[2]) return null;
  if (m[1] === 'w') return bytes.length % 2 === 0 ? bytes.toString('utf16le') : null;
  const id = bytes.toString('utf8');
  return Buffer.from(id, 'utf8').equals(bytes) ? id : null;
}
