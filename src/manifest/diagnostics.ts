// A launch diagnostic (SPEC section 2): `error[CODE]: <message>` then `  hint: <hint>`, exit 2.
// A leaf shared by the manifest's rules, the destination grammar and the launch checks.

export type ManifestErrorCode = 'E-MAN-003' | 'E-CAP-001' | 'E-CAP-007' | 'E-CAP-008';

/** A launch diagnostic. The launcher prints `render()` to stderr and exits with status 2. */
export class ManifestError extends Error {
  override readonly name = 'ManifestError';
  readonly code: ManifestErrorCode;
  readonly hint: string;

  constructor(code: ManifestErrorCode, message: string, hint: string) {
    super(message);
    this.code = code;
    this.hint = hint;
  }

  render(): string {
    return `error[${this.code}]: ${this.message}\n  hint: ${this.hint}`;
  }
}
