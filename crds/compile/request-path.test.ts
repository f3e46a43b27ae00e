import { describe, expect, it } from 'vitest';
import { canonicalPath, canonicalText, neverMatchedText } from './request-path.ts';

describe('the form paths are matched in', () => {
  it('brings a path written in a resource to the form requests are matched in', () => {
    expect(canonicalPath('/caf%c3%a9/')).toBe('/caf%C3%A9/');
    expect(canonicalPath('/café/')).toBe('/caf%C3%A9/');
    expect(canonicalPath('/%7Euser/')).toBe('/~user/');
    expect(canonicalPath('/v1/./items/')).toBe('/v1/items/');
    expect(canonicalPath('/my items/')).toBe('/my%20items/');
    // In a resource, `?` and `#` are characters of the path: no request path holds them unescaped.
    expect(canonicalPath('/a?b#c/')).toBe('/a%3Fb%23c/');
  });

  it('gives a request path the same form, encoding what a URL path holds only encoded', () => {
    for (const path of ['/caf%C3%A9/x', '/caf%c3%a9/x']) expect(canonicalPath(path)).toBe('/caf%C3%A9/x');
    expect(canonicalPath('/x/{a}')).toBe('/x/%7Ba%7D');
    expect(canonicalPath('/x/%7Ba%7D')).toBe('/x/%7Ba%7D');
    // Already in that form: returned as it is.
    for (const path of ['/a/b', "/a-b_c.d~e!$&'()*+,;=:@/f", '/a|b[d]']) expect(canonicalPath(path)).toBe(path);
  });

  it('is its own fixed point', () => {
    for (const path of ['/café/./x//y', '/%7e%2f%c3%a9', '/a b/{c}', '/a\\..\\b', '/a^b']) expect(canonicalPath(canonicalPath(path))).toBe(canonicalPath(path));
  });

  it('brings the text of an OAS path to that form without resolving anything', () => {
    expect(canonicalText('/my items/')).toBe('/my%20items/');
    expect(canonicalText('/café/')).toBe('/caf%C3%A9/');
    expect(canonicalText('/a%7e%2f')).toBe('/a~%2F');
    expect(canonicalText('/./')).toBe('/./');
  });

  it('names the text of a regular expression that no request path holds, and what to write', () => {
    expect(neverMatchedText('/caf%c3%a9')).toEqual({ found: '%c3', write: '%C3' });
    expect(neverMatchedText('/café')).toEqual({ found: 'é', write: '%C3%A9' });
    expect(neverMatchedText('/my items')).toEqual({ found: ' ', write: '%20' });
    expect(neverMatchedText('/%7Euser')).toEqual({ found: '%7E', write: '~' });
    expect(neverMatchedText('/a%2Eb')).toEqual({ found: '%2E', write: '\\.' });
    for (const pattern of ['/caf%C3%A9', '/x%2Fy', '/users/[0-9]+', '/(?<=a)b', '/(?<name>x)', '/a\\s+']) expect(neverMatchedText(pattern), pattern).toBeNull();
  });
});
