/**
 * Whether a POST comes from the review page itself: a page on another origin can make a browser submit any form
 * (a decision, a sign-in) with the browser's cookies. The browser says where a request comes from; trusted here.
 */
import type { Context } from 'hono';

/**
 * Why this POST is not from the page's own origin, or undefined. `Sec-Fetch-Site` (every current browser) must be
 * same-origin; `Origin`, when it names one, must be the page's: review.url's origin, or the host this request was
 * sent to. The page's own forms go with `Origin: null` (its referrer policy is no-referrer), as a page elsewhere may
 * choose to: null, or neither header, tells nothing, and the form's token decides.
 */
export function foreignOrigin(c: Context, pageUrl: string | undefined): string | undefined {
  const fetchSite = c.req.header('sec-fetch-site');
  if (fetchSite !== undefined && fetchSite !== 'same-origin') return `sent from a ${fetchSite} page`;
  const origin = c.req.header('origin');
  if (origin === undefined || origin === 'null') return undefined;
  if (pageUrl !== undefined && origin === new URL(pageUrl).origin) return undefined;
  let host: string | undefined;
  try {
    host = new URL(origin).host;
  } catch {
    host = undefined;
  }
  return host !== undefined && host === c.req.header('host') ? undefined : 'sent from another origin';
}
