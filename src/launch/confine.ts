// The confinement's old single module, kept as a re-export for importers outside src/launch that
// still name it (test/landlock-native.test.ts); the code is in confine-plan.ts (the ruleset) and
// confine-apply.ts (restricting, the handoff, the re-exec). Import from those.
export * from './confine-plan.js';
export * from './confine-apply.js';
