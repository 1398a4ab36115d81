// What a shared object asks of the dynamic loader, read from its ELF headers in JS (no binutils
// needed): the machine, the libraries it needs (DT_NEEDED), the symbol versions it requires from
// each (.gnu.version_r, what `objdump -p` prints under "Version References") and the symbols it
// exports. Little-endian ELF64 only, which is every prebuild this package ships.
import { readFileSync } from 'node:fs';

export interface ElfRequirements {
  /** e_machine: 62 is x86-64, 183 is AArch64. */
  machine: number;
  needed: string[];
  /** Library file name → the version names required from it, e.g. libc.so.6 → GLIBC_2.28. */
  versions: Map<string, string[]>;
  /** Defined global or weak symbols of the dynamic symbol table. */
  exports: string[];
}

const SHT_DYNSYM = 11;
const SHT_DYNAMIC = 6;
const SHT_GNU_VERNEED = 0x6ffffffe;
const DT_NEEDED = 1;

export function readElfRequirements(path: string): ElfRequirements {
  const b = readFileSync(path);
  if (b.readUInt32BE(0) !== 0x7f454c46) throw new Error(`${path}: not an ELF file`);
  if (b[4] !== 2 || b[5] !== 1) throw new Error(`${path}: not little-endian ELF64`);
  const machine = b.readUInt16LE(18);
  const shoff = Number(b.readBigUInt64LE(0x28));
  const shentsize = b.readUInt16LE(0x3a);
  const shnum = b.readUInt16LE(0x3c);
  const sections = Array.from({ length: shnum }, (_, i) => {
    const o = shoff + i * shentsize;
    return {
      type: b.readUInt32LE(o + 4),
      offset: Number(b.readBigUInt64LE(o + 0x18)),
      size: Number(b.readBigUInt64LE(o + 0x20)),
      link: b.readUInt32LE(o + 0x28),
      info: b.readUInt32LE(o + 0x2c),
      entsize: Number(b.readBigUInt64LE(o + 0x38)),
    };
  });
  const str = (table: number, at: number) => {
    const start = sections[table]!.offset + at;
    return b.toString('latin1', start, b.indexOf(0, start));
  };

  const needed: string[] = [];
  const versions = new Map<string, string[]>();
  const exports: string[] = [];
  for (const s of sections) {
    if (s.type === SHT_DYNAMIC) {
      for (let o = s.offset; o + 16 <= s.offset + s.size; o += 16) {
        if (b.readBigInt64LE(o) === BigInt(DT_NEEDED)) needed.push(str(s.link, Number(b.readBigUInt64LE(o + 8))));
      }
    } else if (s.type === SHT_GNU_VERNEED) {
      // Elf64_Verneed {vn_version u16, vn_cnt u16, vn_file u32, vn_aux u32, vn_next u32}, each
      // followed (at vn_aux) by vn_cnt Elf64_Vernaux {hash u32, flags u16, other u16, name u32, next u32}.
      let vn = s.offset;
      for (let i = 0; i < s.info; i++) {
        const file = str(s.link, b.readUInt32LE(vn + 4));
        const names: string[] = [];
        let aux = vn + b.readUInt32LE(vn + 8);
        for (let j = 0; j < b.readUInt16LE(vn + 2); j++) {
          names.push(str(s.link, b.readUInt32LE(aux + 8)));
          aux += b.readUInt32LE(aux + 12);
        }
        versions.set(file, [...(versions.get(file) ?? []), ...names]);
        const next = b.readUInt32LE(vn + 12);
        if (next === 0) break;
        vn += next;
      }
    } else if (s.type === SHT_DYNSYM) {
      // Elf64_Sym {name u32, info u8, other u8, shndx u16, value u64, size u64}
      for (let o = s.offset + s.entsize; o + s.entsize <= s.offset + s.size; o += s.entsize) {
        const bind = b[o + 4]! >> 4;
        const shndx = b.readUInt16LE(o + 6);
        if (shndx !== 0 && (bind === 1 || bind === 2)) exports.push(str(s.link, b.readUInt32LE(o)));
      }
    }
  }
  return { machine, needed, versions, exports: exports.sort() };
}

/** Compares dotted version numbers: '2.28' < '2.2.5' is false, '3.4.21' < '3.4.29' is true. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}
