#!/usr/bin/env python3
"""HF `tokenizers` oracle for tests/tokenizer: builds the comparison corpus and writes what HF produces for it.

The corpus (well over 1 MB) is built deterministically from a fixed seed plus a fresh random part (seed printed):
text in 14 scripts (CJK, kana, Hangul, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Bengali, Tamil, Thai, Georgian,
Armenian, Ethiopic, Latin with accents), source code (this repository and the Python standard library), numbers of
every length, whitespace runs, CRLF, emoji with ZWJ sequences / skin tones / flags / keycaps, combining marks, the
added-token texts, and every code point of planes 0, 1 and 14 (plus samples of the others) in discriminating contexts.

Writes into --out: corpus.jsonl ({"text": ...} per line) and hf_ids.jsonl (one id array per line, HF
Tokenizer.encode(text, add_special_tokens=False).ids), and prints the corpus size and the HF encode time.
Usage: python3 scripts/tokenizer_hf_oracle.py --tokenizer PATH --out DIR [--seed N] [--no-codepoints]
"""
import argparse
import glob
import json
import os
import random
import sys
import time

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPTS = {
    "han": (0x4E00, 0x9FFF), "hiragana": (0x3041, 0x3096), "katakana": (0x30A1, 0x30FA), "hangul": (0xAC00, 0xD7A3),
    "cyrillic": (0x0410, 0x044F), "greek": (0x03B1, 0x03C9), "arabic": (0x0621, 0x064A), "hebrew": (0x05D0, 0x05EA),
    "devanagari": (0x0905, 0x0939), "bengali": (0x0985, 0x09B9), "tamil": (0x0B85, 0x0BB9), "thai": (0x0E01, 0x0E2E),
    "georgian": (0x10D0, 0x10FA), "armenian": (0x0561, 0x0586), "ethiopic": (0x1200, 0x1248),
}
MARKS = {"devanagari": "\u093e\u093f\u0940\u0941\u0947\u094d\u0902", "bengali": "\u09be\u09bf\u09c7\u09cd",
         "thai": "\u0e31\u0e34\u0e35\u0e48\u0e49\u0e4a", "arabic": "\u064b\u064e\u064f\u0650\u0651\u0652",
         "hebrew": "\u05b0\u05b4\u05bc", "tamil": "\u0bbe\u0bbf\u0bcd"}
PUNCT = [".", ",", "!", "?", "、", "。", "！", "？", "«", "»", "—", "…", ":", ";", "\"", "'", "(", ")", "؟", "।", "“", "”"]
LATIN = ["the", "quick", "brown", "fox", "naïve", "café", "Straße", "über", "façade", "Ångström", "déjà", "vu",
         "I'm", "don't", "we'll", "they've", "O'Neil", "e-mail", "https://example.com/a?b=c&d=1", "user@host.org"]
EMOJI = ["😀", "👍🏽", "👩‍👩‍👧‍👦", "🧑‍🤝‍🧑", "👨🏿‍💻", "🏳️‍🌈", "🇫🇷", "🇯🇵🇺🇸", "#️⃣", "1️⃣", "❤️", "☺︎", "🫨", "🪿"]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", " \t ", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n ", "\u00a0", "\u3000",
              "\u2028", "\u0085", "\u000b", "\u000c", "\u2003\u2009", "    \n    ", "\n \n\t\n"]
COMBINING = ["e\u0301", "a\u0308\u0304", "Z\u0351\u0352\u0357\u0358\u035b\u0350", "\u1100\u1161\u11a8", "o\u0338",
             "\u0915\u094d\u0937", "\u0e01\u0e49\u0e33"]


def word(rng, script):
    lo, hi = SCRIPTS[script]
    n = rng.randint(1, 8)
    out = []
    for _ in range(n):
        out.append(chr(rng.randint(lo, hi)))
        if script in MARKS and rng.random() < 0.4:
            out.append(rng.choice(MARKS[script]))
    return "".join(out)


def number(rng):
    kind = rng.random()
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40)))
    if kind < 0.5:
        return digits
    if kind < 0.6:
        return "-" + digits + "." + digits[::-1]
    if kind < 0.7:
        return "{:,}".format(int(digits))
    if kind < 0.8:
        return "".join(chr(0x0660 + int(d)) for d in digits)  # Arabic-Indic
    if kind < 0.85:
        return "".join(chr(0xFF10 + int(d)) for d in digits)  # fullwidth
    if kind < 0.9:
        return "".join(chr(0x0966 + int(d)) for d in digits)  # Devanagari
    return rng.choice(["½", "²³", "Ⅻ", "①②", "𝟙𝟚𝟛", "1e-9", "0x1F", "3.14159", "v1.2.3"])


def sentence(rng):
    parts = []
    for _ in range(rng.randint(3, 20)):
        r = rng.random()
        if r < 0.55:
            parts.append(word(rng, rng.choice(list(SCRIPTS))))
        elif r < 0.7:
            parts.append(rng.choice(LATIN))
        elif r < 0.8:
            parts.append(number(rng))
        elif r < 0.87:
            parts.append(rng.choice(EMOJI))
        elif r < 0.93:
            parts.append(rng.choice(COMBINING))
        else:
            parts.append(rng.choice(PUNCT))
        parts.append(rng.choice(WHITESPACE) if rng.random() < 0.15 else (rng.choice(PUNCT) if rng.random() < 0.1 else " "))
    return "".join(parts)


def source_code(limit):
    files = sorted(glob.glob(os.path.join(ROOT, "src", "**", "*.[ch]*"), recursive=True))
    files += sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))[:60]
    out, total = [], 0
    for path in files:
        if path.endswith("unicode_tables.cpp"):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        for i in range(0, len(text), 4000):
            out.append(text[i:i + 4000])
            total += len(out[-1])
        if total > limit:
            break
    return out


def codepoint_lines(full):
    ranges = [(0, 0x20000), (0xE0000, 0xE0200)] if full else []
    ranges += [(lo, hi) for lo, hi in [(0x20000, 0x110000)]]
    cps = []
    for lo, hi in ranges:
        step = 1 if hi - lo <= 0x20000 or (lo == 0xE0000) else 97
        cps.extend(range(lo, hi, step))
    cps = [c for c in cps if not 0xD800 <= c <= 0xDFFF]
    lines = []
    for i in range(0, len(cps), 32):
        lines.append(" ".join("a{0}!{0}{0}a 1{0}".format(chr(c)) for c in cps[i:i + 32]))
    return lines


def build(seed, tokenizer, with_codepoints):
    rng = random.Random(1234)
    texts = [sentence(rng) for _ in range(6000)]
    texts += source_code(450_000)
    texts += ["".join(rng.choice("0123456789") for _ in range(n)) for n in range(1, 101)]
    texts += [w * n for w in WHITESPACE for n in (1, 2, 3, 7)]
    texts += ["line one\r\nline two\r\n\r\n  indented\r\n", "\r\n" * 9, "a \n", " a", "a ", "  a  ", "\n\na"]
    texts += [t["content"] for t in json.load(open(tokenizer, encoding="utf-8"))["added_tokens"]]
    texts += ["x" + t["content"][:-1] + "y" for t in json.load(open(tokenizer, encoding="utf-8"))["added_tokens"][:50]]
    if with_codepoints:
        texts += codepoint_lines(True)
    fresh = random.Random(seed)
    texts += [sentence(fresh) for _ in range(500)]
    return [t for t in texts if t]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "assets/tokenizer/deepseek-v4/tokenizer.json"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--no-codepoints", action="store_true")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    print(f"corpus fresh seed {seed}")
    texts = build(seed, args.tokenizer, not args.no_codepoints)
    tok = Tokenizer.from_file(args.tokenizer)
    start = time.perf_counter()
    ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    elapsed = time.perf_counter() - start
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    with open(os.path.join(args.out, "hf_ids.jsonl"), "w") as f:
        for row in ids:
            f.write(json.dumps(row) + "\n")
    print(f"{len(texts)} texts, {nbytes} bytes, HF encode_batch {elapsed:.3f} s "
          f"({nbytes / elapsed / 1e6:.2f} MB/s)")


if __name__ == "__main__":
    sys.exit(main())
