/**
 * What a store may be called: its name becomes a folder under snapshot.root, so the rule keeps it one plain folder
 * name (no imports: the config reader, the quick config path and `--db` naming all load it).
 */

/**
 * A store's name is a folder name under snapshot.root (and a key in Redis and the state db): letters, digits, `_`,
 * `.` and `-`, at most 100, starting with a letter, digit or `_` and not ending with `.`. So never `.`, `..` or
 * `...` (the folder itself, the one above it, one a reader takes for either), a hidden name, one a command line takes
 * for an option, nor a separator of any system (`/`, `\`).
 */
export const STORE_NAME = /^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,98}[A-Za-z0-9_-])?$/;
export const STORE_NAME_RULE = 'a store name: letters, digits, _ . - (at most 100), starting with a letter, digit or _, not ending with .';

/** A valid store name made from any text (a file name): what STORE_NAME refuses becomes `_`. */
export function storeNameFrom(text: string): string {
  const name = text.replace(/[^A-Za-z0-9_.-]/g, '_').replace(/^[.-]/, '_').replace(/\.$/, '_').slice(0, 100).replace(/\.$/, '_');
  return STORE_NAME.test(name) ? name : 'store';
}
