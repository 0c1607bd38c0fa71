import LinkifyIt from 'linkify-it';
import tlds from 'tlds';

/**
 * linkify-it set up the way mailparser's `textAsHtml` sets it up (full TLD list, `.onion`, `git:`, fuzzy links,
 * e-mails and IPs, @mentions), except that `ftp:` stays on: stricter than any one mail client. mailparser stops
 * linkifying a large message halfway, so tests run this over the whole received text themselves.
 */
const linkify = new LinkifyIt()
  .tlds(tlds)
  .tlds('onion', true)
  .add('git:', 'http:')
  .set({ fuzzyIP: true, fuzzyLink: true, fuzzyEmail: true });
linkify.add('@', {
  validate(text, pos, self) {
    const tail = text.slice(pos);
    // `re.src_*` are pattern sources (strings) at run time, whatever @types/linkify-it says of `re`.
    const twitter = (self.re.twitter ??= new RegExp(`^([a-zA-Z0-9_]){1,15}(?!_)(?=$|${self.re.src_ZPCc})`));
    const mention = twitter.exec(tail);
    if (mention) {
      if (pos >= 2 && text[pos - 2] === '@') return false;
      return mention[0].length;
    }
    return 0;
  },
});

/** Every link linkify-it finds in the text, as the text it matched. */
export function linksIn(text: string): string[] {
  return (linkify.match(text) ?? []).map((m) => m.raw);
}

/** The text a mail client shows for an HTML part: tags dropped, entities decoded. */
export function htmlToText(html: string): string {
  return html
    .replace(/<[^>]*>/g, ' ')
    .replace(/&#(\d+);/g, (_, n: string) => String.fromCodePoint(Number(n)))
    .replace(/&#x([0-9a-f]+);/gi, (_, n: string) => String.fromCodePoint(parseInt(n, 16)))
    .replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&nbsp;/g, ' ').replace(/&amp;/g, '&');
}
