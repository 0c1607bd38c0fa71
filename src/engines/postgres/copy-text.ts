/**
 * COPY's text format read back: one row a line, fields separated by tabs, `\N` for NULL, backslash escapes for the
 * rest (a tab or a newline inside a value is always escaped, so the bytes 9 and 10 only ever separate).
 */

/** One field of COPY's text format: `\N` is NULL, backslash escapes as COPY TO writes them. */
export function unescapeCopyText(f: string): string | null {
  if (f === '\\N') return null;
  if (!f.includes('\\')) return f;
  return f.replace(/\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|.)/g, (_, e: string) => {
    if (e[0] === 'x' && e.length > 1) return String.fromCharCode(parseInt(e.slice(1), 16));
    if (/^[0-7]/.test(e)) return String.fromCharCode(parseInt(e, 8));
    return ({ b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', v: '\v' } as Record<string, string>)[e] ?? e;
  });
}

const TAB = 9;
const NL = 10;

/**
 * A reader of COPY text given in pieces of any size (a row may span two): for each row, where the fields at `at`
 * (their positions among the row's fields) lie in `buf`, as COPY wrote them (escaped, `\N` for NULL): the k-th asked
 * for is `buf[from[k]..to[k])`, or absent (the row has fewer fields, or the position is -1) when `from[k]` is -1.
 * `buf`, `from` and `to` are valid only during the call. `end()` hands over a last row without its newline.
 */
export function copyFieldReader(at: readonly number[], fields: (buf: Buffer, from: Int32Array, to: Int32Array) => void): { push(piece: Buffer): void; end(): void } {
  const last = Math.max(-1, ...at);
  const starts = new Int32Array(last + 1);
  const ends = new Int32Array(last + 1);
  const from = new Int32Array(at.length);
  const to = new Int32Array(at.length);
  let carry: Buffer | undefined;
  const line = (buf: Buffer, start: number, end: number): void => {
    let found = 0;
    for (let pos = start; found <= last && pos <= end; found++) {
      let tab = buf.indexOf(TAB, pos);
      if (tab < 0 || tab > end) tab = end;
      starts[found] = pos;
      ends[found] = tab;
      pos = tab + 1;
    }
    for (let k = 0; k < at.length; k++) {
      const i = at[k]!;
      if (i < 0 || i >= found) {
        from[k] = -1;
        to[k] = -1;
      } else {
        from[k] = starts[i]!;
        to[k] = ends[i]!;
      }
    }
    fields(buf, from, to);
  };
  const lines = (buf: Buffer): number => {
    let start = 0;
    for (let nl = buf.indexOf(NL); nl >= 0; nl = buf.indexOf(NL, start)) {
      line(buf, start, nl);
      start = nl + 1;
    }
    return start;
  };
  return {
    push(piece) {
      let buf = piece;
      if (carry) {
        // The row begun in the piece before ends in this one: joined, then the rest of this piece read in place.
        const nl = piece.indexOf(NL);
        if (nl < 0) {
          carry = Buffer.concat([carry, piece]);
          return;
        }
        const joined = Buffer.concat([carry, piece.subarray(0, nl)]);
        carry = undefined;
        line(joined, 0, joined.length);
        buf = piece.subarray(nl + 1);
      }
      const done = lines(buf);
      if (done < buf.length) carry = Buffer.from(buf.subarray(done));
    },
    end() {
      if (carry && carry.length > 0) line(carry, 0, carry.length);
      carry = undefined;
    },
  };
}

/**
 * A reader of COPY text given in pieces of any size (a row may span two): for each row, the values of the fields at
 * `at` (their positions among the row's fields; -1, or past the row's end: null), unescaped, handed to `row`. Only
 * the fields asked for become strings. `end()` hands over a last row without its newline.
 */
export function copyRowReader(at: readonly number[], row: (values: (string | null)[]) => void): { push(piece: Buffer): void; end(): void } {
  return copyFieldReader(at, (buf, from, to) => {
    const values: (string | null)[] = [];
    for (let k = 0; k < at.length; k++) values.push(from[k]! < 0 ? null : copyFieldText(buf, from[k]!, to[k]!));
    row(values);
  });
}

/** One field of COPY's text format, `buf[from..to)`, as its value (unescapeCopyText). */
export const copyFieldText = (buf: Buffer, from: number, to: number): string | null => unescapeCopyText(buf.toString('utf8', from, to));
