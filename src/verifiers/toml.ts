/**
 * The part of TOML that configuration files a verifier reads actually use: tables, arrays of tables, dotted
 * keys, basic/literal strings (single and multi-line), integers (with _ and 0x/0o/0b), floats, booleans,
 * dates (kept as text), arrays and inline tables. Enough to select a value; not a validating parser.
 */
export function parseToml(text: string): Record<string, unknown> {
  return new TomlParser(text).parse();
}

type Table = Record<string, unknown>;

class TomlParser {
  private i = 0;
  private readonly root: Table = {};
  private current: Table = this.root;

  constructor(private readonly s: string) {}

  parse(): Table {
    for (;;) {
      this.skipBlank(true);
      if (this.i >= this.s.length) return this.root;
      if (this.s.startsWith('[[', this.i)) {
        this.i += 2;
        const path = this.keyPath(']]');
        this.expect(']]');
        const parent = this.walk(this.root, path.slice(0, -1));
        const last = path[path.length - 1]!;
        const arr = (parent[last] ??= []) as unknown;
        if (!Array.isArray(arr)) this.fail(`"${path.join('.')}" is not an array of tables`);
        const table: Table = {};
        arr.push(table);
        this.current = table;
      } else if (this.s[this.i] === '[') {
        this.i += 1;
        const path = this.keyPath(']');
        this.expect(']');
        this.current = this.walk(this.root, path);
      } else {
        this.keyValue(this.current);
      }
      this.endOfLine();
    }
  }

  private keyValue(into: Table): void {
    const path = this.keyPath('=');
    this.skipSpace();
    this.expect('=');
    this.skipSpace();
    const table = this.walk(into, path.slice(0, -1));
    table[path[path.length - 1]!] = this.value();
  }

  /** Walk (creating tables) down a dotted path; the last element of an array of tables stands for the array. */
  private walk(from: Table, path: string[]): Table {
    let t = from;
    for (const key of path) {
      let next = t[key];
      if (next === undefined) next = t[key] = {};
      if (Array.isArray(next)) next = next[next.length - 1];
      if (typeof next !== 'object' || next === null) this.fail(`"${key}" is already a value`);
      t = next as Table;
    }
    return t;
  }

  private keyPath(end: string): string[] {
    const keys: string[] = [];
    for (;;) {
      this.skipSpace();
      const c = this.s[this.i];
      if (c === '"') keys.push(this.basicString());
      else if (c === "'") keys.push(this.literalString());
      else {
        const m = /^[A-Za-z0-9_-]+/.exec(this.s.slice(this.i));
        if (!m) this.fail('expected a key');
        keys.push(m[0]);
        this.i += m[0].length;
      }
      this.skipSpace();
      if (this.s[this.i] === '.') {
        this.i += 1;
        continue;
      }
      if (!this.s.startsWith(end, this.i)) this.fail(`expected "${end}"`);
      return keys;
    }
  }

  private value(): unknown {
    const c = this.s[this.i];
    if (c === '"') return this.s.startsWith('"""', this.i) ? this.multiline('"""') : this.basicString();
    if (c === "'") return this.s.startsWith("'''", this.i) ? this.multiline("'''") : this.literalString();
    if (c === '[') return this.array();
    if (c === '{') return this.inlineTable();
    const m = /^[^\s,\]}#]+(?: \d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})?)?/.exec(this.s.slice(this.i));
    if (!m) this.fail('expected a value');
    this.i += m[0].length;
    return scalar(m[0], (msg) => this.fail(msg));
  }

  private array(): unknown[] {
    this.expect('[');
    const out: unknown[] = [];
    for (;;) {
      this.skipBlank(true);
      if (this.s[this.i] === ']') {
        this.i += 1;
        return out;
      }
      out.push(this.value());
      this.skipBlank(true);
      if (this.s[this.i] === ',') this.i += 1;
      else if (this.s[this.i] !== ']') this.fail('expected "," or "]" in array');
    }
  }

  private inlineTable(): Table {
    this.expect('{');
    const out: Table = {};
    this.skipSpace();
    if (this.s[this.i] === '}') {
      this.i += 1;
      return out;
    }
    for (;;) {
      this.keyValue(out);
      this.skipSpace();
      if (this.s[this.i] === ',') {
        this.i += 1;
        continue;
      }
      this.expect('}');
      return out;
    }
  }

  private basicString(): string {
    this.expect('"');
    let out = '';
    while (this.s[this.i] !== '"') {
      if (this.i >= this.s.length || this.s[this.i] === '\n') this.fail('unterminated string');
      if (this.s[this.i] === '\\') out += this.escape();
      else out += this.s[this.i++];
    }
    this.i += 1;
    return out;
  }

  private literalString(): string {
    this.expect("'");
    const end = this.s.indexOf("'", this.i);
    const nl = this.s.indexOf('\n', this.i);
    if (end < 0 || (nl >= 0 && nl < end)) this.fail('unterminated string');
    const out = this.s.slice(this.i, end);
    this.i = end + 1;
    return out;
  }

  private multiline(quote: '"""' | "'''"): string {
    this.i += 3;
    if (this.s[this.i] === '\n') this.i += 1;
    else if (this.s.startsWith('\r\n', this.i)) this.i += 2;
    let out = '';
    for (;;) {
      if (this.i >= this.s.length) this.fail('unterminated multi-line string');
      if (this.s.startsWith(quote, this.i)) {
        this.i += 3;
        return out;
      }
      if (quote === '"""' && this.s[this.i] === '\\') {
        const nextLine = /^\\[ \t]*\r?\n\s*/.exec(this.s.slice(this.i));
        if (nextLine) this.i += nextLine[0].length;
        else out += this.escape();
      } else out += this.s[this.i++];
    }
  }

  private escape(): string {
    const c = this.s[this.i + 1];
    this.i += 2;
    const simple: Record<string, string> = { b: '\b', t: '\t', n: '\n', f: '\f', r: '\r', '"': '"', '\\': '\\' };
    if (c !== undefined && c in simple) return simple[c]!;
    if (c === 'u' || c === 'U') {
      const len = c === 'u' ? 4 : 8;
      const hex = this.s.slice(this.i, this.i + len);
      if (!/^[0-9A-Fa-f]+$/.test(hex) || hex.length !== len) this.fail('bad unicode escape');
      this.i += len;
      return String.fromCodePoint(parseInt(hex, 16));
    }
    return this.fail(`bad escape \\${c ?? ''}`);
  }

  private skipSpace(): void {
    while (this.s[this.i] === ' ' || this.s[this.i] === '\t') this.i += 1;
  }

  /** Spaces, and with `lines` also newlines and comments. */
  private skipBlank(lines: boolean): void {
    for (;;) {
      this.skipSpace();
      const c = this.s[this.i];
      if (c === '#') {
        while (this.i < this.s.length && this.s[this.i] !== '\n') this.i += 1;
      } else if (lines && (c === '\n' || c === '\r')) this.i += 1;
      else return;
    }
  }

  private endOfLine(): void {
    this.skipBlank(false);
    if (this.i < this.s.length && this.s[this.i] !== '\n' && this.s[this.i] !== '\r') this.fail('expected the end of the line');
  }

  private expect(token: string): void {
    if (!this.s.startsWith(token, this.i)) this.fail(`expected "${token}"`);
    this.i += token.length;
  }

  private fail(message: string): never {
    const line = this.s.slice(0, this.i).split('\n').length;
    throw new Error(`TOML line ${line}: ${message}`);
  }
}

function scalar(text: string, fail: (m: string) => never): unknown {
  if (text === 'true') return true;
  if (text === 'false') return false;
  if (/^[+-]?(inf|nan)$/.test(text)) return text.includes('nan') ? NaN : text.startsWith('-') ? -Infinity : Infinity;
  if (/^\d{4}-\d{2}-\d{2}|^\d{2}:\d{2}/.test(text)) return text; // dates and times stay text
  const clean = text.replace(/_/g, '');
  if (/^0x[0-9a-fA-F]+$/.test(clean)) return parseInt(clean.slice(2), 16);
  if (/^0o[0-7]+$/.test(clean)) return parseInt(clean.slice(2), 8);
  if (/^0b[01]+$/.test(clean)) return parseInt(clean.slice(2), 2);
  if (/^[+-]?\d+$/.test(clean)) return Number(clean);
  if (/^[+-]?\d+(\.\d+)?([eE][+-]?\d+)?$/.test(clean)) return Number(clean);
  return fail(`not a TOML value: ${text}`);
}
