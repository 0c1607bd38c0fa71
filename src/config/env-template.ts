/**
 * The `${…}` placeholders of a config value: `${NAME}`, `${NAME:-fallback}` (the fallback is a value of its own,
 * so `${A:-${B:-x}}` takes A, else B, else x, as a shell does), and `$${` for a literal `${`. Anything else that
 * starts with `${` is an error, never text: `${}`, `${A B}`, `${A:=x}`, `${A` with no `}` were left as written,
 * and became files named after them.
 */

type Part = string | { name: string; fallback?: Part[] };

/** `text` with its placeholders replaced from `env` (empty counts as unset); `fail` throws, with what is wrong. */
export function expandTemplate(text: string, env: NodeJS.ProcessEnv, fail: (problem: string) => never, taken: (name: string, value: string) => void): string {
  return render(parse(text, 0, undefined, fail).parts, env, fail, taken);
}

function render(parts: Part[], env: NodeJS.ProcessEnv, fail: (problem: string) => never, taken: (name: string, value: string) => void): string {
  return parts
    .map((part) => {
      if (typeof part === 'string') return part;
      const value = env[part.name];
      if (value !== undefined && value !== '') {
        taken(part.name, value);
        return value;
      }
      // A fallback is read only when it is needed: an unset variable in one that is not used is no error.
      if (part.fallback) return render(part.fallback, env, fail, taken);
      return fail(`environment variable ${part.name} is not set`);
    })
    .join('');
}

const NAME = /[A-Za-z_][A-Za-z0-9_]*/y;
const SYNTAX = 'write ${NAME} or ${NAME:-fallback}, and $${ for a literal ${';

/** The parts from `start` to the end of `text`, or to the `}` that closes the fallback of the `${` at `opener`. */
function parse(text: string, start: number, opener: number | undefined, fail: (problem: string) => never): { parts: Part[]; end: number } {
  const parts: Part[] = [];
  let literal = '';
  let i = start;
  while (i < text.length) {
    if (text.startsWith('$${', i)) {
      literal += '${';
      i += 3;
    } else if (text.startsWith('${', i)) {
      if (literal) parts.push(literal);
      literal = '';
      NAME.lastIndex = i + 2;
      const name = NAME.exec(text)?.[0];
      const after = i + 2 + (name?.length ?? 0);
      if (name && text[after] === '}') {
        parts.push({ name });
        i = after + 1;
      } else if (name && text.startsWith(':-', after)) {
        const fallback = parse(text, after + 2, i, fail);
        parts.push({ name, fallback: fallback.parts });
        i = fallback.end;
      } else {
        const shown = text.slice(i, text.indexOf('}', i) + 1 || text.length);
        fail(`"${excerpt(shown)}" is not a placeholder${shown.endsWith('}') ? '' : ': it has no closing }'}; ${SYNTAX}`);
      }
    } else if (opener !== undefined && text[i] === '}') {
      if (literal) parts.push(literal);
      return { parts, end: i + 1 };
    } else {
      literal += text[i++];
    }
  }
  if (opener !== undefined) fail(`"${excerpt(text.slice(opener))}" is not a placeholder: it has no closing }; ${SYNTAX}`);
  if (literal) parts.push(literal);
  return { parts, end: i };
}

const excerpt = (s: string) => (s.length > 60 ? `${s.slice(0, 60)}…` : s);
