"""libaccel's BERT WordPiece tokenizer (src/text) against Hugging Face's tokenizers 0.19.1 (the
test venv's), on sentence-transformers' all-MiniLM-L6-v2 tokenizer (build/minilm/model, which
tools/fetch_minilm.sh fetches): every entry of every Debian fortunes file, a set of hard strings
written here, and every Unicode code point (64 a text, spaced), each with truncation at 256 as
sentence-transformers sets it (enable_truncation(256), no padding) and without. libaccel loads the
model both from tokenizer.json and from vocab.txt (+ tokenizer_config.json); both must give
tokenizers' ids for every text.

    python3 tokenizers_diff.py TOKENIZER_PROBE MODEL_DIR   (exits 77 without the venv or the model)
"""
import glob
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tracker_readers import SKIPPED, python_with, rerun  # noqa: E402

HARD = [
    "", " ", "\t\n\r ", "Hello, World!", "naïve café résumé Ångström Øre Ærø Łódź",
    "Crème brûlée, piñata, jalapeño; über Straße", "ÉCOLE ÉLÈVE", "e\u0301 a\u0308 o\u0302\u0323",
    "a\u0323\u0302 vs a\u0302\u0323",  # canonical ordering of combining marks
    "中文字符测试，汉字！", "日本語のテキストとカタカナ", "한국어 텍스트 가나다", "𠀀𪜀 ideographs beyond the BMP",
    "tab\there\x00nul\x01soh\x7fdel\x0bvt\x0cff\u0085nel\u200bzwsp\ufeffbom\ufffdrepl",
    "emoji 😀🎉👍🏽 🥰 🫠 ❤️ 👨‍👩‍👧", "a" * 100, "a" * 101, "supercalifragilistic" * 6,
    "é" * 101, "...!!!???,,,;;;---___***", "(([[{{<<>>}}]]))", "«quoted» „German“ ‘single’ —dash– …",
    "non\u00a0breaking\u2009thin\u3000ideographic\u202fnarrow", "ΣΑΣ ΟΔΟΣ Ελληνικά ΆΈΉ", "İstanbul ıIiİ Iğdır ŞŞ",
    "ǅ ǈ ǋ ǲ ﬁ ﬂ ß ẞ", "Ⅻ ⅻ ① Ⓐ", "$100 + 50% = €150 ^_^ `code` |pipe| ~tilde~", "[CLS] [SEP] [PAD] [MASK] [UNK]",
    "hello[SEP]world [sep] [MASK]ed", "\u0378\u0379 unassigned \U000e0001 tag \u061c mark",
    "\ue000 private \U000f0000 use", "ʼnapostrophe ŉ", "x\u0300\u0301\u0302\u0303\u0304 stacked",
    "𝐁𝐨𝐥𝐝 𝕯𝖔𝖚𝖇𝖑𝖊", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ", "Ω Å K ℃ ℉", "اللغة العربية", "עברית", "हिन्दी भाषा",
    "ไทย ภาษา", "\u1e9b\u0323 \u0344 \u0f73 \u0f75 \u0f81",
    "word " * 300,  # truncation at 256
]


def fortunes():
    entries = []
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if path.endswith((".dat", ".u8")) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        entry = []
        for line in text.split("\n"):
            if line == "%":
                entries.append("\n".join(entry))
                entry = []
            else:
                entry.append(line)
        if any(entry):
            entries.append("\n".join(entry))
    return entries


def every_code_point():
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    return [" ".join(chr(c) for c in cps[i:i + 64]) for i in range(0, len(cps), 64)]


def reference_side(model_dir, texts):
    from tokenizers import Tokenizer

    lines = {}
    for max_length in (256, 0):
        t = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        t.no_padding()
        if max_length:
            t.enable_truncation(max_length)
        else:
            t.no_truncation()
        lines[max_length] = [" ".join(map(str, e.ids)) for e in t.encode_batch(texts)]
    return lines


def main():
    probe, model_dir = sys.argv[1], sys.argv[2]
    if os.environ.get("ACCEL_TOKENIZERS_CHILD"):
        return child(probe, model_dir)
    if not os.path.isfile(os.path.join(model_dir, "tokenizer.json")):
        print(f"skipped: no MiniLM model at {model_dir} (tools/fetch_minilm.sh fetches it)")
        return SKIPPED
    python = python_with(["tokenizers"])
    if not python:
        return SKIPPED
    return rerun(python, os.path.abspath(__file__), "ACCEL_TOKENIZERS_CHILD", [probe, model_dir])


def child(probe, model_dir):
    import tokenizers

    assert tokenizers.__version__ == "0.19.1", tokenizers.__version__
    groups = [("fortunes entries", fortunes()), ("hard strings", HARD),
              ("code-point texts", every_code_point())]
    texts = [t for _, g in groups for t in g]
    ref = reference_side(model_dir, texts)
    paths = [os.path.join(model_dir, "tokenizer.json"), os.path.join(model_dir, "vocab.txt")]
    payload = b"".join(b"%d\n%s" % (len(b), b) for b in (t.encode("utf-8") for t in texts))
    out = subprocess.run([probe] + paths, input=payload, capture_output=True, check=True).stdout
    ours = out.decode("utf-8").split("\n")
    failures, k = 0, 0
    for i, text in enumerate(texts):
        for path in paths:
            for max_length in (256, 0):
                got, want = ours[k].strip(), ref[max_length][i]
                k += 1
                if got != want:
                    failures += 1
                    if failures <= 10:
                        print(f"MISMATCH {os.path.basename(path)} max_length={max_length} {text[:80]!r}"
                              f"\n  libaccel:   {got[:200]}\n  tokenizers: {want[:200]}")
    counts = ", ".join(f"{len(g)} {name}" for name, g in groups)
    print(f"compared {len(texts)} texts ({counts}) x 2 truncations x 2 files: {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
