/**
 * The one form of a URL path that routing and endpoint rules match (docs/behaviour.md#endpoint-paths):
 * the gateway brings each request's path to it before anything matches, and the compile step
 * brings the paths a user writes (listen paths, OAS paths) to it, so that `/café/`,
 * `/caf%c3%a9/` and `/caf%C3%A9/` are one path on both sides.
 */

/** A path that holds only characters kept as they are, and no dot segment or repeated slash, is already in that form. */
const needsCanonical = /\/\.|\/\/|[^A-Za-z0-9\-._~!$&'()*+,;=:@/]/;
const percentEncoded = /%([0-9A-Fa-f]{2})/g;
const unreserved = /^[A-Za-z0-9._~-]$/;

/**
 * A percent-encoded unreserved character is the character itself (RFC 3986 §2.3): decoded, so
 * `/items/%73pecial` meets the `/items/special` limit instead of passing it by. Any other
 * escape is kept, its hex in upper case (§6.2.2.1), so `%2f` and `%2F` are one path.
 */
function decodeUnreserved(path: string): string {
  return path.replace(percentEncoded, (_, hex: string) => {
    const char = String.fromCharCode(Number.parseInt(hex, 16));
    return unreserved.test(char) ? char : `%${hex.toUpperCase()}`;
  });
}

/**
 * Resolve dot segments (plain or percent-encoded), backslashes, repeated slashes and escaped
 * unreserved characters, and percent-encode what a URL path holds only encoded (a space, a
 * letter outside ASCII, `{`, …), so `/api/public/../private` (or `/api/public/x\..\..\private`,
 * which Node accepts and WHATWG URL parsers read as slashes) cannot pass an ignored
 * `/public/.*` matcher and reach `/private` on the upstream, nor `%70rivate` pass a `/private`
 * limit. A `?` or `#` in a path written in a resource is a character of it, not a query or a
 * fragment. Most request paths are in this form already and are returned as they are.
 */
export function canonicalPath(path: string): string {
  if (!needsCanonical.test(path)) return path;
  const literal = path.replace(/[?#]/g, (char) => (char === '?' ? '%3F' : '%23'));
  return new URL(decodeUnreserved(literal).replace(/[\\/]{2,}/g, '/'), 'http://gw.invalid').pathname;
}

/** What a URL path holds only percent-encoded: controls, a space, `"#<>?` `` ` `` `{}`, and every character outside ASCII. */
const encodedInPaths = /[^\x21-\x7E]|["#<>?`{}]/gu;

/**
 * A piece of a path written in a resource, in the form requests are matched in, with no dot
 * segment resolved: an OAS path's text between its placeholders.
 */
export function canonicalText(text: string): string {
  return decodeUnreserved(text).replace(encodedInPaths, (char) => {
    try {
      return encodeURIComponent(char);
    } catch {
      // A lone surrogate, which a URL parser reads as U+FFFD.
      return '%EF%BF%BD';
    }
  });
}

/** An escape a canonical path never holds: lower-case hex, or an unreserved character's. */
const uncanonicalEscape = /%(?:[0-9A-Fa-f][a-f]|[a-f][0-9A-F]|4[1-9A-F]|5[0-9A]|6[1-9A-F]|7[0-9A]|3[0-9]|2[DE]|5F|7E)/;

/**
 * The text of a regular-expression path that no request path, as the gateway matches it,
 * holds, with what to write instead; null when there is none. Such a rule would never match:
 * a space, a letter outside ASCII, an escape in lower case or of an unreserved character.
 */
export function neverMatchedText(pattern: string): { found: string; write: string } | null {
  const escape = uncanonicalEscape.exec(pattern);
  if (escape !== null) {
    const decoded = decodeUnreserved(escape[0]);
    return { found: escape[0], write: decoded.startsWith('%') ? decoded : decoded.replace(/[.]/, '\\.') };
  }
  const raw = /[^\x21-\x7E]/u.exec(pattern);
  return raw === null ? null : { found: raw[0], write: canonicalText(raw[0]) };
}
