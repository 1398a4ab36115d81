// The Node.js floor, checked before the command loads anything else. Node 20 ran most of it, but
// not as a supported whole: fastify's own dependency tree declares Node >= 22 (light-my-request's
// `cookie`), the compile cache needs 22.1, Node 20 reached end of life in April 2026, and CI tests
// 22 and 24 only. So below 22 the command refuses in one line rather than half-working
// (package.json `engines` says the same; npm only warns).

export const NODE_MAJOR_MIN = 22;

/** The refusal for a Node older than the floor, or null when `version` (`v20.20.2`) is new enough. */
export function nodeVersionProblem(version: string): string | null {
  const major = Number(/^v?(\d+)\./.exec(version)?.[1] ?? NaN);
  if (Number.isInteger(major) && major >= NODE_MAJOR_MIN) return null;
  return `error: resource-plane needs Node.js ${NODE_MAJOR_MIN} or newer, and this is Node.js ${version} (Node 20 reached end of life in April 2026): run it with a newer node`;
}
