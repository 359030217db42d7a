"""The Unicode data HF tokenizers' Rust code sees, where it differs from Python's.

HF tokenizers (the reference for parity, 0.23) classifies characters with tables of several Unicode versions:
BERT's punctuation, control-character and mark tests, combining classes and decompositions come from tables
older than Python's; lowercasing and ``is_numeric`` from Rust's standard library (newer than Python 3.11's
Unicode 14); its regular expressions run on Oniguruma (Unicode 16: 0x1C89 is a letter, 0x11DE0 no number).
attnlab runs on Python's ``unicodedata`` (Unicode 14 on Python 3.11) and the ``regex`` module (Unicode 17).
On ordinary text they agree; on the characters below they do not, and a tokenizer that must give HF's ids
for any input (unassigned and newly assigned code points included) has to know them.

The tables were measured by sweeping every code point through HF tokenizers' own components and comparing
with Python's answer; ``tests/tokenizers/test_tokenizers_unicode_compat.py`` repeats the sweep (slow) and
fails when a table no longer matches (a new HF, Python or regex version). Ranges are hexadecimal code points.

Python's own Unicode version moves with the interpreter (3.11: 14.0, 3.12: 15.0, 3.13: 15.1, 3.14: 16.0), and
the tables are differences from 14.0. A newer Python knows the code points assigned since (28,111 of them up
to Unicode 18.0, ``ASSIGNED_AFTER_14``) and gives two older ones another category (``CATEGORY_14``); HF's
tables know neither (so its answer is Python 3.11's). On such a Python the functions here answer for those
code points as Unicode 14 does: unassigned (category Cn, combining class 0, no decomposition, no case
mapping), unless a table above says otherwise. ``category`` is ``unicodedata.category`` seen that way.
(Python 3.10's Unicode 13 lacks what 14.0 added; there parity holds only outside those code points.)
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_right
from functools import cache

__all__ = [
    "category",
    "is_alnum",
    "hf_is_control",
    "hf_is_punctuation",
    "hf_is_nonspacing_mark",
    "hf_nfd",
    "hf_decomposition",
    "hf_combining",
    "hf_is_combining_mark",
    "hf_lower",
    "ranges_class",
    "onig_class",
    "bert_punctuation_class",
]


class _Ranges:
    """Sorted, disjoint code point ranges with a membership test."""

    def __init__(self, spec: str) -> None:
        pairs: list[tuple[int, int]] = []
        for item in spec.split():
            lo, _, hi = item.partition("-")
            pairs.append((int(lo, 16), int(hi or lo, 16)))
        pairs.sort()
        self.pairs = pairs
        self._starts = [lo for lo, _ in pairs]

    def __contains__(self, cp: object) -> bool:
        if not isinstance(cp, int):
            return False
        i = bisect_right(self._starts, cp) - 1
        return i >= 0 and cp <= self.pairs[i][1]

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.pairs)

    def __bool__(self) -> bool:  # not __len__, which counts every code point
        return bool(self.pairs)


def _ranges(*parts: str) -> _Ranges:
    return _Ranges(" ".join(parts))


# Punctuation for BERT's split: ASCII symbols and Unicode P* as HF's tables have them (726 code points).
BERT_PUNCTUATION = _ranges(
    "21-2F 3A-40 5B-60 7B-7E A1 A7 AB B6-B7 BB BF 37E 387 55A-55F 589-58A 5BE 5C0 5C3 5C6 5F3-5F4 "
    "609-60A 60C-60D 61B 61E-61F 66A-66D 6D4 700-70D 7F7-7F9 830-83E 85E 964-965 970 AF0 DF4 E4F E5A-E5B "
    "F04-F12 F14 F3A-F3D F85 FD0-FD4 FD9-FDA 104A-104F 10FB 1360-1368 1400 166D-166E 169B-169C 16EB-16ED "
    "1735-1736 17D4-17D6 17D8-17DA 1800-180A 1944-1945 1A1E-1A1F 1AA0-1AA6 1AA8-1AAD 1B5A-1B60 1BFC-1BFF "
    "1C3B-1C3F 1C7E-1C7F 1CC0-1CC7 1CD3 2010-2027 2030-2043 2045-2051 2053-205E 207D-207E 208D-208E "
    "2308-230B 2329-232A 2768-2775 27C5-27C6 27E6-27EF 2983-2998 29D8-29DB 29FC-29FD 2CF9-2CFC 2CFE-2CFF "
    "2D70 2E00-2E2E 2E30-2E42 3001-3003 3008-3011 3014-301F 3030 303D 30A0 30FB A4FE-A4FF A60D-A60F A673 "
    "A67E A6F2-A6F7 A874-A877 A8CE-A8CF A8F8-A8FA A8FC A92E-A92F A95F A9C1-A9CD A9DE-A9DF AA5C-AA5F "
    "AADE-AADF AAF0-AAF1 ABEB FD3E-FD3F FE10-FE19 FE30-FE52 FE54-FE61 FE63 FE68 FE6A-FE6B FF01-FF03 "
    "FF05-FF0A FF0C-FF0F FF1A-FF1B FF1F-FF20 FF3B-FF3D FF3F FF5B FF5D FF5F-FF65 10100-10102 1039F 103D0 "
    "1056F 10857 1091F 1093F 10A50-10A58 10A7F 10AF0-10AF6 10B39-10B3F 10B99-10B9C 11047-1104D "
    "110BB-110BC 110BE-110C1 11140-11143 11174-11175 111C5-111C9 111CD 111DB 111DD-111DF 11238-1123D "
    "112A9 114C6 115C1-115D7 11641-11643 1173C-1173E 12470-12474 16A6E-16A6F 16AF5 16B37-16B3B 16B44 "
    "1BC9F 1DA87-1DA8B "
)

# BERT_PUNCTUATION as the regex module's \p{P} plus the ASCII symbols, less and plus these: the regex module
# scans a class of 300 explicit ranges range by range, slower than a property test (benchmarks/tokenizers.py).
REGEX_ONLY_BERT_PUNCTUATION = _ranges(
    "61D 9FD A76 C77 C84 1B4E-1B4F 1B7D-1B7F 2E43-2E4F 2E52-2E5D 2E60-2E63 10D6E 10EAD 10ED0 10F55-10F59 "
    "10F86-10F89 113D4-113D5 113D7-113D8 1144B-1144F 1145A-1145B 1145D 11660-1166C 116B9 1183B 11944-11946 "
    "119E2 11A3F-11A46 11A9A-11A9C 11A9E-11AA2 11B00-11B09 11BE1 11C41-11C45 11C70-11C71 11EF7-11EF8 "
    "11F43-11F4F 11FFF 12FF1-12FF2 16D6D-16D6F 16E97-16E9A 16FE2 1E5FF 1E95E-1E95F "
)
BERT_PUNCTUATION_NOT_IN_REGEX = _ranges("166D 111C9 ")

# Format characters (Cf) in Python's database that HF's control-character table lacks (kept, not removed).
CONTROL_UNKNOWN = _ranges("890-891 8E2 110CD 13430-13438 ")

# Nonspacing marks (Mn) in Python's database that HF's table lacks (kept by accent stripping).
NONSPACING_UNKNOWN = _ranges(
    "7FD 898-89F 8CA-8E1 9FE AFA-AFF B55 C04 C3C D00 D3B-D3C D81 EBA 180F 1885-1886 1ABF-1ACE 1DF6-1DFB "
    "A82C A8C5 A8FF A9BD 10D24-10D27 10EAB-10EAC 10F46-10F50 10F82-10F85 11070 11073-11074 110C2 111C9 "
    "111CF 1123E 1133B 11438-1143F 11442-11444 11446 1145E 1182F-11837 11839-1183A 1193B-1193C 1193E "
    "11943 119D4-119D7 119DA-119DB 119E0 11A01-11A0A 11A33-11A38 11A3B-11A3E 11A47 11A51-11A56 "
    "11A59-11A5B 11A8A-11A96 11A98-11A99 11C30-11C36 11C38-11C3D 11C3F 11C92-11CA7 11CAA-11CB0 "
    "11CB2-11CB3 11CB5-11CB6 11D31-11D36 11D3A 11D3C-11D3D 11D3F-11D45 11D47 11D90-11D91 11D95 11D97 "
    "11EF3-11EF4 16F4F 16FE4 1CF00-1CF2D 1CF30-1CF46 1E000-1E006 1E008-1E018 1E01B-1E021 1E023-1E024 "
    "1E026-1E02A 1E130-1E136 1E2AE 1E2EC-1E2EF 1E944-1E94A "
)

# Characters HF's table still calls nonspacing marks (Mc today).
NONSPACING_EXTRA = _ranges("1734 ")

# Characters whose canonical decomposition HF's tables lack (left whole by NFD).
NFD_UNKNOWN = _ranges("11938 ")

# Characters whose compatibility (or canonical) decomposition HF's tables lack (left whole by NFKD/NFKC).
NFKD_UNKNOWN = _ranges("32FF A7F2-A7F4 AB69 10781-10785 10787-107B0 107B2-107BA 11938 1F16C 1FBF0-1FBF9")

# Combining marks (canonical combining class > 0 in Python's database) whose class HF's normalisation tables
# do not know (class 0 there: never reordered).
CCC_UNKNOWN = _ranges(
    "7FD 898-89F 8CA-8D3 9FE C3C D3B-D3C EBA 1715 1ABF-1ACE 1DF6-1DFA A82C 10D24-10D27 10EAB-10EAC "
    "10F46-10F50 10F82-10F85 11070 1133B 1145E 11839-1183A 1193D-1193E 11943 119E0 11A34 11A47 11A99 "
    "11D42 11D44-11D45 11D97 16FF0-16FF1 1E130-1E136 1E2AE 1E2EC-1E2EF"
)

# Marks (M*) in Python's database that HF's StripAccents table lacks (kept), and two it still has (Mc once).
COMBINING_MARK_UNKNOWN = _ranges(
    "7FD 898-89F 8CA-8D3 9FE AFA-AFF B55 C04 C3C D00 D3B-D3C D81 EBA 1715 180F 1ABF-1ACE 1CF7 1DF6-1DFA "
    "A82C A8FF 10D24-10D27 10EAB-10EAC 10F46-10F50 10F82-10F85 11070 11073-11074 110C2 11145-11146 111C9 "
    "111CE-111CF 1133B 1145E 1182C-1183A 11930-11935 11937-11938 1193B-1193E 11940 11942-11943 "
    "119D1-119D7 119DA-119E0 119E4 11A01-11A0A 11A33-11A39 11A3B-11A3E 11A47 11A51-11A5B 11A8A-11A99 "
    "11D31-11D36 11D3A 11D3C-11D3D 11D3F-11D45 11D47 11D8A-11D8E 11D90-11D91 11D93-11D97 11EF3-11EF6 "
    "16F4F 16F7F-16F87 16FE4 16FF0-16FF1 1CF00-1CF2D 1CF30-1CF46 1E130-1E136 1E2AE 1E2EC-1E2EF "
)
COMBINING_MARK_EXTRA = _ranges("1CF2-1CF3")

# In the regex module's class L (newer Unicode) but not in Oniguruma's.
REGEX_ONLY_L = _ranges(
    "558 58B-58C 88F C5C CDC 208F 209D-209F A7CE-A7CF A7D2 A7D4 A7DD A7E2 A7F1 AB6C-AB6D 107BB-107BF "
    "10940-10959 10EC5-10EC7 10ED9-10EEE 11B0A 11DB0-11DDB 11DF1 16EA0-16EB8 16EBB-16ED3 16FF2-16FF3 "
    "187F8-187FF 18CD6-18CDA 18D09-18D20 18D80-18DF2 18E00-19191 191A0-191D2 1B123-1B128 1B168 1D6A6 "
    "1DF1F-1DF24 1DF2B-1DF81 1DF90-1DF96 1DFCD-1DFFF 1E6C0-1E6DE 1E6E0-1E6E2 1E6E4-1E6E5 1E6E7-1E6ED "
    "1E6F0-1E6F4 1E6FE-1E6FF 2B73A-2B73F 2B81E 2CEA2-2CEAD 323B0-33479 3D000-3FC3F "
)

# In the regex module's class N (newer Unicode) but not in Oniguruma's.
REGEX_ONLY_N = _ranges("11DE0-11DE9 1246F 12475-1247F 12550-12686 16FF4-16FF6 ")

# In the regex module's \w (Unicode 17) but not a word character for HF's Whitespace pre-tokeniser.
REGEX_ONLY_w = _ranges(
    "558 58B-58C 5C8-5C9 88F B53-B54 C5C CDC 1ACF-1AF0 208F 209D-209F A7CE-A7CF A7D2 A7D4 A7DD "
    "A7E2 A7F1 AB6C-AB6D 107BB-107BF 10940-10959 10EC5-10EC7 10ECB-10ECF 10ED9-10EEE 10EF0-10EFB 11B0A "
    "11B60-11B67 11DB0-11DDB 11DE0-11DE9 11DF0-11DF1 1246F 12475-1247F 12550-12686 16EA0-16EB8 "
    "16EBB-16ED3 16FF2-16FF6 187F8-187FF 18CD6-18CDA 18D09-18D20 18D80-18DF2 18E00-19191 191A0-191D2 "
    "1B123-1B128 1B168 1D127-1D128 1D250-1D252 1D25B-1D25C 1D25F 1D280-1D281 1D6A6 1DF1F-1DF24 "
    "1DF2B-1DF81 1DF90-1DF96 1DFCD-1DFFF 1E6C0-1E6DE 1E6E0-1E6F5 1E6FE-1E6FF 2B73A-2B73F 2B81E "
    "2CEA2-2CEAD 323B0-33479 3D000-3FC3F "
)


# In the regex module's class P (newer Unicode) but not in Oniguruma's.
REGEX_ONLY_P = _ranges("2E60-2E63 10ED0 ")

# Lowercase mappings HF's (newer) tables know and Python's do not.
LOWERCASE_EXTRA = {
    0x1C89: "\u1c8a",
    0xA7CB: "ɤ",
    0xA7CC: "\ua7cd",
    0xA7CE: "\ua7cf",
    0xA7D2: "ꟓ",
    0xA7D4: "ꟕ",
    0xA7DA: "\ua7db",
    0xA7DC: "ƛ",
    0x10D50: "\U00010d70",
    0x10D51: "\U00010d71",
    0x10D52: "\U00010d72",
    0x10D53: "\U00010d73",
    0x10D54: "\U00010d74",
    0x10D55: "\U00010d75",
    0x10D56: "\U00010d76",
    0x10D57: "\U00010d77",
    0x10D58: "\U00010d78",
    0x10D59: "\U00010d79",
    0x10D5A: "\U00010d7a",
    0x10D5B: "\U00010d7b",
    0x10D5C: "\U00010d7c",
    0x10D5D: "\U00010d7d",
    0x10D5E: "\U00010d7e",
    0x10D5F: "\U00010d7f",
    0x10D60: "\U00010d80",
    0x10D61: "\U00010d81",
    0x10D62: "\U00010d82",
    0x10D63: "\U00010d83",
    0x10D64: "\U00010d84",
    0x10D65: "\U00010d85",
    0x16EA0: "\U00016ebb",
    0x16EA1: "\U00016ebc",
    0x16EA2: "\U00016ebd",
    0x16EA3: "\U00016ebe",
    0x16EA4: "\U00016ebf",
    0x16EA5: "\U00016ec0",
    0x16EA6: "\U00016ec1",
    0x16EA7: "\U00016ec2",
    0x16EA8: "\U00016ec3",
    0x16EA9: "\U00016ec4",
    0x16EAA: "\U00016ec5",
    0x16EAB: "\U00016ec6",
    0x16EAC: "\U00016ec7",
    0x16EAD: "\U00016ec8",
    0x16EAE: "\U00016ec9",
    0x16EAF: "\U00016eca",
    0x16EB0: "\U00016ecb",
    0x16EB1: "\U00016ecc",
    0x16EB2: "\U00016ecd",
    0x16EB3: "\U00016ece",
    0x16EB4: "\U00016ecf",
    0x16EB5: "\U00016ed0",
    0x16EB6: "\U00016ed1",
    0x16EB7: "\U00016ed2",
    0x16EB8: "\U00016ed3",
}


# Code points assigned from Unicode 15.0 to 18.0 (unassigned in Python 3.11's 14.0; measured with the
# unicodedata2 backport 18.0.0 against Python 3.11's unicodedata).
ASSIGNED_AFTER_14 = _ranges(
    "558 58B-58C 5C8-5C9 88F 897 B53-B54 C5C CDC CF3 ECE 1ACF-1AF0 1B4E-1B4F 1B7F 1C89-1C8A 208F "
    "209D-209F 20C1-20C4 2427-2429 2B96 2E60-2E63 2FFC-2FFF 31E4-31E5 31EF A7CB-A7CF A7D2 A7D4 "
    "A7DA-A7DD A7E2 A7F1 AB6C-AB6D FBC3-FBD2 FD90-FD91 FDC8-FDCE 105C0-105F3 107BB-107BF 10940-10959 "
    "10D40-10D65 10D69-10D85 10D8E-10D8F 10EC2-10EC7 10EC9-10EEE 10EF0-10EFF 1123F-11241 11380-11389 "
    "1138B 1138E 11390-113B5 113B7-113C0 113C2 113C5 113C7-113CA 113CC-113D5 113D7-113D8 113E1-113E2 "
    "116D0-116E3 11B00-11B0A 11B60-11B67 11BC0-11BE1 11BF0-11BF9 11DB0-11DDB 11DE0-11DE9 11DF0-11DF1 "
    "11F00-11F10 11F12-11F3A 11F3E-11F5A 1246F 12475-1247F 12550-12686 1342F 13439-13455 13460-143FA "
    "16100-16139 16D40-16D79 16EA0-16EB8 16EBB-16ED3 16FF2-16FF6 187F8-187FF 18CD6-18CDA 18CFF "
    "18D09-18D20 18D80-18DF2 18E00-19191 191A0-191D2 1B123-1B128 1B132 1B155 1B168 1CC00-1CCFC "
    "1CD00-1CEB3 1CEBA-1CED0 1CED2-1CED4 1CEDD-1CEFD 1D127-1D128 1D1EB-1D1FF 1D250-1D281 1D2C0-1D2D3 "
    "1D6A6 1DB00-1DB1C 1DF1F-1DF81 1DF90-1DF96 1DFCD-1DFFF 1E030-1E06D 1E08F 1E4D0-1E4F9 1E5D0-1E5FA "
    "1E5FF 1E6C0-1E6DE 1E6E0-1E6F5 1E6FE-1E6FF 1F1AE 1F6D8-1F6D9 1F6DC 1F774-1F77F 1F7D9-1F7DB "
    "1F7F1-1F7FF 1F8B2-1F8BB 1F8C0-1F8C1 1F8D0-1F8D8 1FA54-1FA57 1FA75-1FA77 1FA87-1FA8F 1FAAD-1FAAF "
    "1FABB-1FABF 1FAC6 1FAC8 1FACC-1FACF 1FADA-1FADD 1FADF 1FAE8-1FAEB 1FAEF 1FAF7-1FAFA 1FBCB-1FBEF "
    "1FBFA 2B739-2B73F 2B81E 2CEA2-2CEAD 2EBF0-2EE5D 31350-33479 3D000-3FC3F "
)

# Code points assigned by 14.0 whose category changed since (16.0: U+1171E Mn -> Mc; 17.0: U+0295 Ll -> Lo):
# their Unicode 14 category. Their combining classes and decompositions did not change.
CATEGORY_14 = {0x295: "Ll", 0x1171E: "Mn"}

TABLES_UNICODE = (14, 0, 0)  # the unicodedata version the tables above were measured against


def newer_unicode(version: str) -> bool:
    """Whether a unicodedata of ``version`` (e.g. ``"15.0.0"``) is newer than the tables' 14.0."""
    return tuple(int(x) for x in version.split(".")) > TABLES_UNICODE


# What this interpreter's unicodedata assigns and Unicode 14 did not: answered as unassigned.
UNASSIGNED_IN_14 = ASSIGNED_AFTER_14 if newer_unicode(unicodedata.unidata_version) else _Ranges("")


def category(ch: str) -> str:
    """``unicodedata.category`` as Unicode 14 has it (on any Python from 3.11)."""
    cp = ord(ch)
    if cp in UNASSIGNED_IN_14:
        return "Cn"
    if UNASSIGNED_IN_14 and cp in CATEGORY_14:
        return CATEGORY_14[cp]
    return unicodedata.category(ch)


def is_alnum(ch: str) -> bool:
    """``str.isalnum`` for one character, as on Python 3.11 (code points assigned since are not)."""
    return ch.isalnum() and ord(ch) not in UNASSIGNED_IN_14


def hf_is_control(ch: str) -> bool:
    """BERT's control characters as HF removes them: Cc, Cf and Co but tab, newline and carriage return.

    Unassigned code points (Cn) are not control characters there (google-research/bert's Python, which tests
    ``category.startswith("C")``, deletes them; HF keeps them, and the WordPiece model makes them "[UNK]")."""
    if ch in "\t\n\r":
        return False
    cat = category(ch)
    return cat in ("Cc", "Cf", "Co") and ord(ch) not in CONTROL_UNKNOWN


def hf_is_punctuation(ch: str) -> bool:
    """BERT's punctuation (ASCII symbols and Unicode P*) as HF's tables have it."""
    return ord(ch) in BERT_PUNCTUATION


def hf_is_nonspacing_mark(ch: str) -> bool:
    """A nonspacing mark (Mn) as HF's accent stripping sees it."""
    cp = ord(ch)
    if cp in NONSPACING_EXTRA:
        return True
    return category(ch) == "Mn" and cp not in NONSPACING_UNKNOWN


def hf_nfd(text: str) -> str:
    """NFD as HF computes it (characters whose decomposition its tables lack are left whole)."""
    if not any(ord(c) in NFD_UNKNOWN or ord(c) in UNASSIGNED_IN_14 for c in text):
        return unicodedata.normalize("NFD", text)
    return "".join(c if _whole(ord(c), False) else unicodedata.normalize("NFD", c) for c in text)


def _whole(cp: int, compat: bool) -> bool:
    """Whether HF's tables leave code point ``cp`` undecomposed (by NFD, or NFKD when ``compat``) where Python
    may not."""
    return cp in NFD_UNKNOWN or cp in UNASSIGNED_IN_14 or (compat and cp in NFKD_UNKNOWN)


def hf_decomposition(ch: str, compat: bool) -> str:
    """One character's full decomposition (canonical, or compatibility when ``compat``) as HF has it."""
    if _whole(ord(ch), compat):
        return ch
    return unicodedata.normalize("NFKD" if compat else "NFD", ch)


def hf_is_combining_mark(ch: str) -> bool:
    """A mark (Mn, Mc, Me) as HF's ``StripAccents`` removes it."""
    cp = ord(ch)
    if cp in COMBINING_MARK_EXTRA:
        return True
    return category(ch)[0] == "M" and cp not in COMBINING_MARK_UNKNOWN


def hf_combining(ch: str) -> int:
    """The canonical combining class HF's normalisation tables give ``ch``."""
    cls = unicodedata.combining(ch)
    return 0 if cls and (ord(ch) in CCC_UNKNOWN or ord(ch) in UNASSIGNED_IN_14) else cls


def hf_lower(ch: str) -> str:
    """One character lowercased as Rust's ``char::to_lowercase`` does (no final-sigma context)."""
    cp = ord(ch)
    return LOWERCASE_EXTRA.get(cp) or (ch if cp in UNASSIGNED_IN_14 else ch.lower())


def ranges_class(r: _Ranges) -> str:
    """The body of a regex character class holding ``r`` (for ``[...]``)."""
    return "".join(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in r.pairs)


def bert_punctuation_class() -> str:
    """A regex (``regex.V1``) character class matching exactly ``BERT_PUNCTUATION``, written as a Unicode
    property with a few exceptions (see ``REGEX_ONLY_BERT_PUNCTUATION``)."""
    base = r"[\p{P}\x21-\x2f\x3a-\x40\x5b-\x60\x7b-\x7e]"
    minus, plus = ranges_class(REGEX_ONLY_BERT_PUNCTUATION), ranges_class(BERT_PUNCTUATION_NOT_IN_REGEX)
    return f"[[{base}--[{minus}]]||[{plus}]]"


_ONIG = {
    r"\p{L}": (r"\p{L}", REGEX_ONLY_L, None),
    r"\p{N}": (r"\p{N}", REGEX_ONLY_N, None),
    # HF's Whitespace pre-tokeniser's word characters (not Oniguruma's \w, which also takes "½", "²"...).
    r"\w": (r"\w", REGEX_ONLY_w, None),
    r"\p{P}": (r"\p{P}", REGEX_ONLY_P, None),
}


@cache
def onig_class(name: str) -> str:
    """A regex (``regex.V1``) character class matching what Oniguruma's ``name`` (``\\p{L}``, ``\\p{N}``,
    ``\\w``, ``\\p{P}``) matches in HF tokenizers, e.g. ``[[\\p{L}--[...]]]``."""
    base, minus, plus = _ONIG[name]
    out = f"[{base}--[{ranges_class(minus)}]]"
    if plus is not None:
        out = f"[{out}||[{ranges_class(plus)}]]"
    return out
