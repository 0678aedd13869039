"""All-caps text as the providers' published tokenizers read it, against cl100k, on general text.

Run in a throwaway venv, never the project's (none of these is a dependency of ctxguard):

    python3 -m venv /tmp/capsvenv
    /tmp/capsvenv/bin/pip install tiktoken tokenizers sentencepiece mistral_common wordfreq
    pip download anthropic==0.30.0 --no-deps -d /tmp/anthropic-0.30.0   # its wheel ships tokenizer.json
    (cd /tmp/anthropic-0.30.0 && unzip -o anthropic-0.30.0-py3-none-any.whl anthropic/tokenizer.json)
    /tmp/capsvenv/bin/python bench/capitals.py --claude /tmp/anthropic-0.30.0/anthropic/tokenizer.json \
        --cl100k .venv/lib/python3.11/site-packages/tiktoken_ext/data/cl100k_base.tiktoken

The texts are general, not the recorded corpus: the commonest English words (wordfreq's top 1,000,
5,000 and 20,000, each counted alone after a space) and four licences (/usr/share/common-licenses:
GPL-3, Apache-2.0, MPL-2.0, GFDL-1.3) upper-cased, and the lines of the machine's
/usr/share/doc/*/copyright files and licences that are written in capitals (their disclaimers). For
each tokenizer it prints what it reads of the text against cl100k, upper-cased and lower-cased, and
the tokens it reads more than cl100k per capital letter of a run of two or more
(``ctxguard.tokens.capitals_surplus``'s unit): the rate a provider's accounting charges
(docs/budget.md, "All-caps text"). Tokenizers: Claude's (the one the anthropic SDK shipped until
0.38, Claude 2's), Mistral's Tekken (mistral-common's ``tekken_240911.json``) and SentencePiece
(``tokenizer.model.v1``, the vocabulary of v1 to v7), and with ``--gemma`` a Gemma SentencePiece
model (none ships in a registry package: google-genai's local tokenizer downloads it at run time).
"""

from __future__ import annotations

import argparse
import glob
import re
import statistics
from collections.abc import Callable
from pathlib import Path

_CAPITALS = re.compile(r"[A-Z]{2,}")
_CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|"""
                   r"""\s*[\r\n]|\s+(?!\S)|\s+""")
LICENCES = ("GPL-3", "Apache-2.0", "MPL-2.0", "GFDL-1.3")


def tokenizers(args: argparse.Namespace) -> dict[str, Callable[[str], int]]:
    import mistral_common
    import sentencepiece
    import tiktoken
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    from tiktoken.load import load_tiktoken_bpe
    from tokenizers import Tokenizer

    cl100k = tiktoken.Encoding(name="cl100k", mergeable_ranks=load_tiktoken_bpe(args.cl100k),
                               pat_str=_CL100K_PATTERN, special_tokens={})
    data = Path(mistral_common.__file__).parent / "data"
    tekken = MistralTokenizer.from_file(str(data / "tekken_240911.json")).instruct_tokenizer.tokenizer
    spm = sentencepiece.SentencePieceProcessor(model_file=str(data / "tokenizer.model.v1"))
    found: dict[str, Callable[[str], int]] = {
        "cl100k": lambda text: len(cl100k.encode_ordinary(text)),
        "tekken": lambda text: len(tekken.encode(text, bos=False, eos=False)),
        "mistral-spm": lambda text: len(spm.encode(text)),
    }
    if args.claude:
        claude = Tokenizer.from_file(args.claude)
        found["claude-2"] = lambda text: len(claude.encode(text, add_special_tokens=False).ids)
    if args.gemma:
        gemma = sentencepiece.SentencePieceProcessor(model_file=args.gemma)
        found["gemma"] = lambda text: len(gemma.encode(text))
    return found


def capitals(text: str) -> int:
    return sum(map(len, _CAPITALS.findall(text)))


def texts() -> list[tuple[str, str]]:
    from wordfreq import top_n_list

    out = []
    for n in (1000, 5000, 20000):
        words = [w for w in top_n_list("en", n) if w.isascii() and w.isalpha() and len(w) >= 2]
        out.append((f"top {n:,} words", "\n".join(" " + w for w in words)))
    for name in LICENCES:
        out.append((f"{name} upper-cased", Path("/usr/share/common-licenses", name).read_text()))
    seen: set[str] = set()
    lines = []
    for path in sorted(glob.glob("/usr/share/doc/*/copyright")) + sorted(glob.glob("/usr/share/common-licenses/*")):
        for line in Path(path).read_text(errors="ignore").splitlines():
            line = line.strip()
            letters = [c for c in line if c.isalpha()]
            if len(letters) >= 20 and sum(c.isupper() for c in letters) > 0.9 * len(letters) and line not in seen:
                seen.add(line)
                lines.append(line)
    out.append(("all-caps lines as written", "\n".join(lines)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cl100k", required=True, help="cl100k_base.tiktoken")
    parser.add_argument("--claude", help="the anthropic SDK's tokenizer.json (<= 0.38)")
    parser.add_argument("--gemma", help="a Gemma SentencePiece model, if one is at hand")
    args = parser.parse_args()
    counters = tokenizers(args)
    others = [name for name in counters if name != "cl100k"]
    rates: dict[str, list[float]] = {name: [] for name in others}
    heads = " | ".join(f"{n} ÷ cl100k upper / lower | {n} more a capital" for n in others)
    print(f"| text | capitals | {heads} |")
    print("|---|---:|" + "---:|---:|" * len(others))
    for label, text in texts():
        upper, lower = text.upper(), text.lower()
        letters = capitals(upper)
        base_upper, base_lower = counters["cl100k"](upper), counters["cl100k"](lower)
        cells = []
        for name in others:
            read_upper, read_lower = counters[name](upper), counters[name](lower)
            rate = (read_upper - base_upper) / letters
            rates[name].append(rate)
            cells.append(f"{read_upper / base_upper:.2f} / {read_lower / base_lower:.2f} | {rate:+.3f}")
        print(f"| {label} | {letters:,} | " + " | ".join(cells) + " |")
    for name in others:
        found = rates[name]
        print(f"{name}: tokens more a capital {min(found):+.3f} to {max(found):+.3f}, "
              f"median {statistics.median(found):+.3f}")


if __name__ == "__main__":
    main()
