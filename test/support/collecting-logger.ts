import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../common/logger.ts';

/**
 * A logger (info level unless told), configured as the product's own (redaction, error serializer), whose
 * JSON lines land in `lines`, so tests can assert what was (and was not) logged.
 */
export function collectingLogger(lines: string[], level: Parameters<typeof createLogger>[1] = 'info'): Logger {
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  return createLogger('test', level, stream);
}
