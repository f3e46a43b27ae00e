import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { sessionSchema } from '../crds/session.ts';
import { fuzzParameters } from '../test/support/fuzz.ts';
import { validValues } from '../test/support/schema-arbitrary.ts';
import { MemorySessionStore } from './session-store.ts';

/**
 * The session record decoder: what a store holds is read back as the session that was
 * written, and anything else (a record of an older or newer gw, a hand edit, garbage) is
 * decoded to a session or to "absent", never to a throw. Raw values in a real Redis are
 * fuzzed by the integration suite (test/integration/fuzz/).
 */

const RUNS = 150;

describe('session record decoder (fuzz)', () => {
  it('reads back every session the schema accepts, as written', async () => {
    await fc.assert(
      fc.asyncProperty(validValues(sessionSchema), async (input) => {
        const store = new MemorySessionStore();
        const session = sessionSchema.parse(input);
        await store.put('hash', session);
        expect(await store.get('hash')).toEqual(JSON.parse(JSON.stringify(session)));
      }),
      fuzzParameters(RUNS),
    );
  });

  it('decodes any JSON value to a session or a refusal, never a throw', () => {
    const session = validValues(sessionSchema);
    const corrupted = fc.tuple(session, fc.string(), fc.jsonValue({ maxDepth: 2 })).map(([s, field, value]) => ({ ...(s as object), [field]: value }));
    fc.assert(
      fc.property(fc.oneof(fc.jsonValue({ maxDepth: 3 }), corrupted), (value) => {
        const parsed = sessionSchema.safeParse(value);
        if (parsed.success) expect(sessionSchema.safeParse(JSON.parse(JSON.stringify(parsed.data))).success).toBe(true);
      }),
      fuzzParameters(RUNS),
    );
  });
});
