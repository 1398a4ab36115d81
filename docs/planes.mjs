// Draws docs/planes.svg, the README's picture of the two planes and the trace. The picture is
// this file: edit the boxes and arrows below, then `node docs/planes.mjs` (a test holds the
// committed SVG equal to what this writes). Plain SVG, no dependency, no fonts beyond sans-serif.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const W = 800;
const H = 430;
const esc = (s) => s.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;');

/** A box with a bold title and plain lines under it. */
function box(x, y, w, h, title, lines = [], fill = '#f6f8fa') {
  const text = [`<text x="${x + 10}" y="${y + 22}" font-weight="bold">${esc(title)}</text>`,
    ...lines.map((l, i) => `<text x="${x + 10}" y="${y + 42 + i * 17}" font-size="12">${esc(l)}</text>`)];
  return [`<rect x="${x}" y="${y}" width="${w}" height="${h}" rx="8" fill="${fill}" stroke="#57606a"/>`, ...text].join('\n');
}

/** An arrow from (x1,y1) to (x2,y2), its label at the middle, offset by (dx,dy). */
function arrow(x1, y1, x2, y2, label = '', dx = 0, dy = -6, both = false) {
  const mx = (x1 + x2) / 2 + dx;
  const my = (y1 + y2) / 2 + dy;
  return [`<line x1="${x1}" y1="${y1}" x2="${x2}" y2="${y2}" stroke="#24292f" stroke-width="1.5" marker-end="url(#head)"${both ? ' marker-start="url(#head)"' : ''}/>`,
    label ? `<text x="${mx}" y="${my}" font-size="12" text-anchor="middle" fill="#0550ae">${esc(label)}</text>` : ''].join('\n');
}

const parts = [
  // Who talks to the server.
  box(20, 20, 200, 70, 'operator (you)', ['curl, resource-plane ls / get']),
  box(20, 130, 200, 86, 'agent runtime', ['drives one session over MCP', 'on stdio: share-file,', 'fetch-peer-file']),
  box(580, 20, 200, 86, 'peer capsule', ['another session\'s server;', 'it redeems a handle it', 'was given']),
  // The server: one per session, two planes.
  `<rect x="270" y="10" width="260" height="250" rx="10" fill="none" stroke="#57606a" stroke-dasharray="5 4"/>`,
  `<text x="280" y="30" font-size="12" fill="#57606a">resource-plane serve (one per session)</text>`,
  box(285, 40, 230, 80, 'operator plane', ['GET /resources/files[/<path>]', 'list and read exports.files.root', 'by path; never writes'], '#ddf4ff'),
  box(285, 140, 230, 100, 'peer plane', ['share-file: a handle for one file,', 'one audience, until it expires', 'GET /resources/peer/<handle>', 'fetch-peer-file: lands in peer-in/'], '#dafbe1'),
  // What it serves from, and where it records.
  box(20, 300, 330, 110, 'the capsule\'s workdir', ['out/         the export roots (exports.files.root,', '             exports.peer_files.root)', 'peer-in/     where fetched files land', 'murmur.yaml  the manifest (better kept outside)']),
  box(450, 300, 330, 110, 'trace.jsonl (the audit record)', ['one line per list, read, mint, redeem, fetch,', 'written before any byte leaves; in the', 'records directory, outside the workdir,', 'out of the capsule\'s reach'], '#fff8c5'),
  arrow(220, 55, 285, 70, 'HTTP', 0, -8),
  arrow(220, 175, 285, 185, 'MCP', 0, -8),
  arrow(640, 106, 518, 190, 'redeem', 40, 0, true),
  arrow(285, 112, 170, 298, 'reads', -30, 30),
  arrow(330, 240, 290, 298, 'lands', 28, 4),
  arrow(515, 100, 600, 298, '', 0, 0),
  arrow(515, 225, 600, 298, 'a line for every act', 95, 10),
];

export function planesSvg() {
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="14" fill="#24292f" xml:space="preserve">
<title>capsule-resource-plane: the operator plane, the peer plane and the trace</title>
<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#24292f"/></marker></defs>
<rect width="${W}" height="${H}" fill="#ffffff"/>
${parts.join('\n')}
</svg>
`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(fileURLToPath(new URL('./planes.svg', import.meta.url)), planesSvg());
}
