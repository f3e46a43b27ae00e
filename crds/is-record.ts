/** A JSON object (not null, not an array): what a parsed document or body field must be before its keys are read. */
export const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
