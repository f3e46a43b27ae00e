import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../common/logger.ts';

/**
 * An info-level logger, configured as the product's own (redaction, error serializer), whose
 * JSON lines land in `lines`, so tests can assert what was (and was not) logged.
 */
export function collectingLogger(lines: string[]): Logger {
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  return createLogger('test', 'info', stream);
}
