"""Post-processors: add the special tokens of a model's input template.

* BERT (Devlin et al. 2019): ``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]``, type ids 0 for ``[CLS] A [SEP]``
  and 1 for ``B [SEP]``.
* RoBERTa (Liu et al. 2019): ``<s> A </s>`` and ``<s> A </s></s> B </s>``, with byte-level offset trimming.
* :class:`TemplateProcessing`: any such template, written as in HF tokenizers
  (``"[CLS] $A [SEP] $B:1 [SEP]:1"``).

A processor maps the encodings of the sequences (one or two, already truncated; each possibly with overflowing
windows) to the final encoding. Overflowing windows are combined as HF tokenizers does: each window of A with
B, then with each window of B, then A with each window of B; the result is one flat list. As in HF, a
template's type ids go to the main encodings only: a window cut off by truncation keeps the type id its
sequence was encoded with (0 for A, 1 for B). Under T5's pair template ``$A:0 </s>:0 $B:0 </s>:0`` the
second text reads type 0 in the first windows and 1 in those made of its own overflow.
"""

from __future__ import annotations

from collections.abc import Sequence as _Seq
from typing import Any

from attnlab.tokenizers.encoding import Encoding
from attnlab.tokenizers.pre_tokenizers import bytes_to_unicode

__all__ = [
    "PostProcessor",
    "TemplateProcessing",
    "BertProcessing",
    "RobertaProcessing",
    "ByteLevelProcessing",
    "Sequence",
    "bert_template",
    "roberta_template",
]

# A template item: ("special", token, type_id) or ("sequence", 0 | 1, type_id)
TemplateItem = tuple[str, Any, int]


class PostProcessor:
    """Base class."""

    def added_tokens(self, is_pair: bool) -> int:
        return 0

    def process(self, encodings: list[Encoding], add_special_tokens: bool = True) -> Encoding:
        """Combine one or two (truncated) encodings into the final one, overflowing windows included."""
        if not any(e.overflowing for e in encodings):  # the common case, kept short
            return self.join([self.process_each(e) for e in encodings], add_special_tokens)
        encodings = [self.process_each(e) for e in encodings]
        for e in encodings:
            e.overflowing = [self.process_each(o) for o in e.overflowing]
        return _combine(encodings, lambda parts, windows: self.join(parts, add_special_tokens, windows))

    def process_each(self, encoding: Encoding) -> Encoding:
        """Per-sequence adjustment before joining (e.g. offset trimming); default: unchanged."""
        return encoding

    def join(
        self, parts: list[Encoding], add_special_tokens: bool, windows: tuple[bool, ...] = ()
    ) -> Encoding:
        """One final encoding of ``parts`` (A, or A and B); ``windows[i]`` says that part i is an overflowing
        window, which keeps the type ids it was encoded with."""
        out = Encoding()
        for i, p in enumerate(parts):
            _mark_sequence(p, i, p.type_ids[0] if p.type_ids else 0)
            out.extend(p)
        return out

    def to_json(self) -> dict[str, Any] | None:
        raise NotImplementedError


def _mark_sequence(e: Encoding, seq: int, type_id: int | None) -> None:
    e.sequence_ids = [seq] * len(e.ids)
    if type_id is not None:
        e.type_ids = [type_id] * len(e.ids)


def _combine(encodings: list[Encoding], join) -> Encoding:
    """Join the main windows and every combination of overflowing windows (HF tokenizers' order);
    ``join(parts, windows)`` is told which parts are overflowing windows."""
    a = encodings[0]
    if len(encodings) == 1:
        out = join([a], (False,))
        out.overflowing = [join([o], (True,)) for o in a.overflowing]
        return out
    b = encodings[1]
    out = join([a, b], (False, False))
    over: list[Encoding] = []
    for ao in a.overflowing:
        over.append(join([ao, b], (True, False)))
        for bo in b.overflowing:
            over.append(join([ao, bo], (True, True)))
    for bo in b.overflowing:
        over.append(join([a, bo], (False, True)))
    out.overflowing = over
    return out


class TemplateProcessing(PostProcessor):
    """Special tokens placed by a template.

    Args:
        single: template for one sequence, e.g. ``"[CLS] $A [SEP]"`` or a list of items.
        pair: template for two, e.g. ``"[CLS] $A [SEP] $B:1 [SEP]:1"``; ``$A``/``$B`` are the sequences,
            ``:n`` a type id.
        special_tokens: ``[(token, id), ...]`` for every special token the templates use.
    """

    # HF's TemplateProcessing sets the template's type ids on the main encodings only, so an overflowing
    # window keeps those it was encoded with; its BertProcessing and RobertaProcessing give every window the
    # template's.
    windows_keep_type_ids = True

    def __init__(
        self,
        single: str | list[TemplateItem],
        pair: str | list[TemplateItem] | None,
        special_tokens: _Seq[tuple[str, int]],
    ) -> None:
        self.special_tokens = {t: i for t, i in special_tokens}
        self.single = parse_template(single) if isinstance(single, str) else list(single)
        self.pair = (
            (parse_template(pair) if isinstance(pair, str) else list(pair)) if pair is not None else None
        )
        for tmpl in (self.single, self.pair or []):
            for kind, what, _ in tmpl:
                if kind == "special" and what not in self.special_tokens:
                    raise ValueError(
                        f"template uses the special token {what!r}, which is not among the special tokens "
                        f"{sorted(self.special_tokens)}"
                    )

    def added_tokens(self, is_pair: bool) -> int:
        tmpl = self.pair if is_pair else self.single
        return sum(1 for kind, _, _ in (tmpl or []) if kind == "special")

    def process(self, encodings: list[Encoding], add_special_tokens: bool = True) -> Encoding:
        if len(encodings) == 2 and self.pair is None:
            raise ValueError("this post-processor has no template for pairs")
        return super().process(encodings, add_special_tokens)

    def join(
        self, parts: list[Encoding], add_special_tokens: bool, windows: tuple[bool, ...] = ()
    ) -> Encoding:
        tmpl = self.single if len(parts) == 1 else self.pair
        ids: list[int] = []
        tokens: list[str] = []
        starts: list[int] = []  # the offsets as columns (Encoding makes the tuples when they are read)
        ends: list[int] = []
        type_ids: list[int] = []
        special: list[int] = []
        attention: list[int] = []
        words: list[int | None] = []
        seqs: list[int | None] = []
        for kind, what, type_id in tmpl:  # type: ignore[union-attr]
            if kind == "sequence":
                p = parts[what]
                n = len(p.ids)
                ids += p.ids
                tokens += p.tokens
                p_starts, p_ends = p.offset_columns()
                starts += p_starts
                ends += p_ends
                own = self.windows_keep_type_ids and windows and windows[what]
                type_ids += p.type_ids if own else [type_id] * n
                special += p.special_tokens_mask
                attention += p.attention_mask
                words += p.word_ids
                seqs += [what] * n
            elif add_special_tokens:
                ids.append(self.special_tokens[what])
                tokens.append(what)
                starts.append(0)
                ends.append(0)
                type_ids.append(type_id)
                special.append(1)
                attention.append(1)
                words.append(None)
                seqs.append(None)
        return Encoding(
            ids, tokens, None, type_ids, special, attention, words, seqs, starts=starts, ends=ends
        )

    def to_json(self) -> dict[str, Any]:
        def items(tmpl: list[TemplateItem]) -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            for kind, what, type_id in tmpl:
                if kind == "sequence":
                    out.append({"Sequence": {"id": "AB"[what], "type_id": type_id}})
                else:
                    out.append({"SpecialToken": {"id": what, "type_id": type_id}})
            return out

        return {
            "type": "TemplateProcessing",
            "single": items(self.single),
            "pair": items(self.pair or []),
            "special_tokens": {
                t: {"id": t, "ids": [i], "tokens": [t]} for t, i in self.special_tokens.items()
            },
        }


def parse_template(template: str) -> list[TemplateItem]:
    """``"[CLS] $A [SEP] $B:1 [SEP]:1"`` -> template items.

    As HF tokenizers reads them: ``$``/``$A`` is sequence A, ``$B`` sequence B, ``$1`` sequence A with type
    id 1, ``$B:1`` sequence B with type id 1, ``[SEP]:1`` a special token with type id 1.
    """
    items: list[TemplateItem] = []
    for word in template.split():
        if word.startswith("$"):
            name, colon, tid = word[1:].partition(":")
            if colon:
                if not tid.isdigit() or name not in ("", "A", "B"):
                    raise ValueError(f"template item {word!r}: expected $A, $B, $A:<type id> or $B:<type id>")
                items.append(("sequence", int(name == "B"), int(tid)))
            elif name in ("", "A", "B"):
                items.append(("sequence", int(name == "B"), 0))
            elif name.isdigit():
                items.append(("sequence", 0, int(name)))
            else:
                raise ValueError(f"template item {word!r}: expected $A, $B, $A:<type id> or $B:<type id>")
        else:
            name, colon, tid = word.rpartition(":")
            if colon and name and tid.isdigit():
                items.append(("special", name, int(tid)))
            else:
                items.append(("special", word, 0))
    return items


def bert_template(cls: tuple[str, int], sep: tuple[str, int]) -> TemplateProcessing:
    """BERT's ``[CLS] A [SEP] B [SEP]`` with type ids 0 then 1."""
    c, s = cls[0], sep[0]
    return TemplateProcessing(f"{c} $A {s}", f"{c} $A {s} $B:1 {s}:1", [cls, sep])


class BertProcessing(TemplateProcessing):
    """HF tokenizers' ``BertProcessing``: BERT's template."""

    windows_keep_type_ids = False

    def __init__(self, sep: tuple[str, int], cls: tuple[str, int]) -> None:
        c, s = cls[0], sep[0]
        super().__init__(f"{c} $A {s}", f"{c} $A {s} $B:1 {s}:1", [cls, sep])
        self.sep, self.cls = tuple(sep), tuple(cls)

    def to_json(self) -> dict[str, Any]:
        return {"type": "BertProcessing", "sep": list(self.sep), "cls": list(self.cls)}


def trim_byte_level_offsets(e: Encoding, add_prefix_space: bool) -> Encoding:
    """Move offsets off leading/trailing spaces ("Ġ") of byte-level tokens, as HF's ``trim_offsets`` does."""
    space = bytes_to_unicode()[32]
    offsets = e.offsets
    for i, tok in enumerate(e.tokens):
        if not tok or not (tok[0] == space or tok[-1] == space or tok[0].isspace() or tok[-1].isspace()):
            continue
        lead = len(tok) - len(tok.lstrip(space + " "))
        trail = len(tok) - len(tok.rstrip(space + " "))
        if not lead and not trail:
            continue
        s, t = offsets[i]
        if lead:
            first = i == 0 or s == 0
            if first and add_prefix_space and lead == 1:
                lead = 0
            s = min(s + lead, t)
        if trail and t >= trail:
            t = max(t - trail, s)
        offsets[i] = (s, t)
    return e


class RobertaProcessing(TemplateProcessing):
    """RoBERTa's ``<s> A </s></s> B </s>`` (all type ids 0, overflowing windows too), with byte-level offset
    trimming."""

    windows_keep_type_ids = False

    def __init__(
        self,
        sep: tuple[str, int] = ("</s>", 2),
        cls: tuple[str, int] = ("<s>", 0),
        trim_offsets: bool = True,
        add_prefix_space: bool = True,
    ) -> None:
        c, s = cls[0], sep[0]
        # RoBERTa has no segment embeddings to speak of: HF gives the second sequence type id 0 as well.
        super().__init__(f"{c} $A {s}", f"{c} $A {s} {s} $B {s}", [cls, sep])
        self.sep, self.cls = tuple(sep), tuple(cls)
        self.trim_offsets = trim_offsets
        self.add_prefix_space = add_prefix_space

    def process_each(self, encoding: Encoding) -> Encoding:
        if self.trim_offsets:
            trim_byte_level_offsets(encoding, self.add_prefix_space)
        return encoding

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "RobertaProcessing",
            "sep": list(self.sep),
            "cls": list(self.cls),
            "trim_offsets": self.trim_offsets,
            "add_prefix_space": self.add_prefix_space,
        }


def roberta_template(
    cls: tuple[str, int] = ("<s>", 0), sep: tuple[str, int] = ("</s>", 2)
) -> RobertaProcessing:
    return RobertaProcessing(sep=sep, cls=cls)


class ByteLevelProcessing(PostProcessor):
    """GPT-2's post-processor: no special tokens, only byte-level offset trimming."""

    def __init__(
        self, trim_offsets: bool = True, add_prefix_space: bool = True, use_regex: bool = True
    ) -> None:
        self.trim_offsets = trim_offsets
        self.add_prefix_space = add_prefix_space
        self.use_regex = use_regex

    def process_each(self, encoding: Encoding) -> Encoding:
        if self.trim_offsets:
            trim_byte_level_offsets(encoding, self.add_prefix_space)
        return encoding

    def join(
        self, parts: list[Encoding], add_special_tokens: bool, windows: tuple[bool, ...] = ()
    ) -> Encoding:
        out = Encoding()
        for i, p in enumerate(parts):
            _mark_sequence(p, i, None)
            out.extend(p)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "ByteLevel",
            "add_prefix_space": self.add_prefix_space,
            "trim_offsets": self.trim_offsets,
            "use_regex": self.use_regex,
        }


class Sequence(PostProcessor):
    """Several processors: per-sequence adjustments of all, then the joining of the last template."""

    def __init__(self, processors: _Seq[PostProcessor]) -> None:
        self.processors = list(processors)

    def added_tokens(self, is_pair: bool) -> int:
        return sum(p.added_tokens(is_pair) for p in self.processors)

    def process_each(self, encoding: Encoding) -> Encoding:
        for p in self.processors:
            encoding = p.process_each(encoding)
        return encoding

    def join(
        self, parts: list[Encoding], add_special_tokens: bool, windows: tuple[bool, ...] = ()
    ) -> Encoding:
        joiners = [p for p in self.processors if isinstance(p, TemplateProcessing)]
        if joiners:
            return joiners[-1].join(parts, add_special_tokens, windows)
        return super().join(parts, add_special_tokens, windows)

    def to_json(self) -> dict[str, Any]:
        return {"type": "Sequence", "processors": [p.to_json() for p in self.processors]}
