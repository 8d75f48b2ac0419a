"""A Record -> model inputs, through the model's own processor and chat template, with a label mask.

How the answer tokens are found, for any processor: the conversation is rendered once with the
processor's chat template; the character span of each assistant answer (plus the end-of-turn token
that follows it) is located by rendering the prefix up to that turn. The rendered text is tokenized
by the tokenizer alone (with offsets, so each token knows its characters) and by the processor (which
expands each media placeholder into its run of media tokens, plus boundary tokens or frame timestamps
for some families). The literal text between placeholders appears unchanged in both sequences, so
finding each literal segment in the processor's output carries each token's label across. Nothing
family-specific is assumed beyond "the processor only rewrites media placeholders".

Checks, each a BadRecord (a DataError with a `reason` that skip policies count under):
- placeholders in the rendered text vs media parts, per record (failure mode 16);
- the encoded length against `data.max_length`; a record is never truncated, since that could cut media tokens (17);
- media files that are missing or undecodable (failure mode 18), via mmtune.data.media;
- text holding one of the tokenizer's turn tokens (`<|im_end|>` in an answer: "special token in text").
Anything else a record makes the tokenizer or processor raise is that record's BadRecord too
(`formats.isolated`, around encode / measure / encode_prompt); a system turn the template refuses, system_turn.py.
"""

from __future__ import annotations

import re

from ..errors import DataError
from .answer_tail import last_answer_start
from .documents import encode_document, measure_document, require_chat_template
from .formats import BadRecord, isolated_method
from .history_turns import HISTORY, history_answer
from .length_bound import refuse_over_floor
from .media_caps import MediaCaps
from .media_tokens import audio_extractor, media_token_ids, whisper_audio_tokens, with_frames_mask
from .records import MEDIA_TYPES, Record, content_parts, last_assistant_index, part_text, trained_only
from .records import answer_text as _answer_text
from .rendered_answer import rewritten_answer
from .system_turn import render as _render
from .tool_render import call_text, reference, template_message, tool_texts, with_tools

TOKEN_KEYS = ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids")
# Past this many answers in one record, its length is checked from one tokenization before the per-answer
# renders (Encoder._too_many_turns).
MANY_ANSWERS = 16


class Encoder:
    """The one code that says what a record becomes: `encode` (the tensors training sees) and
    `measure` (the same token counts without decoding pixels, for scans and the planner's worst case).
    Media caps are the resolved run's (`resolved.media`: set on the processor by mmtune.resolve, read back,
    and applied here when media are loaded and counted); an encoder built without one takes the config's."""

    @classmethod
    def for_run(cls, resolved) -> Encoder:
        processor = resolved.need_processor()
        require_chat_template(processor, resolved.cfg)
        return cls(processor, resolved.family, resolved.cfg, media=resolved.media)

    def __init__(self, processor, family, cfg, media: MediaCaps | None = None):
        self.processor = processor
        self.family = family
        self.cfg = cfg
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.max_length = cfg.data.max_length
        self.system_prompt = cfg.data.system_prompt
        self.text_only = self.tokenizer is processor
        self.modalities = {"text"}
        if getattr(processor, "image_processor", None) is not None:
            self.modalities.add("image")
        if getattr(processor, "video_processor", None) is not None:
            self.modalities.add("video")
        if audio_extractor(processor) is not None:
            self.modalities.add("audio")
        if family is not None:  # what mmtune wires and tests for the family, whatever else its processor has
            # (SmolVLM's, InternVL's, GLM-4V's and LLaVA-OneVision's processors take videos that mmtune does not
            # feed their models: such a record is a counted "modality not supported", not a crash in the model)
            self.modalities &= set(family.modalities) | {"text"}
        # Placeholder strings (what the template writes per media item) and token ids (what they expand to).
        self.placeholder = {k: getattr(processor, f"{k}_token", None) for k in MEDIA_TYPES}
        self.media_token_id = media_token_ids(processor)
        self.placeholder_ids = {k: self.tokenizer.convert_tokens_to_ids(t) for k, t in self.placeholder.items()
                                if t and self.tokenizer.convert_tokens_to_ids(t) != self.tokenizer.unk_token_id}
        self.batch_ok = True  # encode_batch.encode_many may merge records into one processor call
        self._count_memo: dict = {}  # media sizes -> tokens per item (measure's processor arithmetic)
        fe = audio_extractor(processor)
        self.sampling_rate = int(getattr(fe, "sampling_rate", 16000) or 16000)
        self.media = media if media is not None else MediaCaps.asked(cfg.model, self.sampling_rate)
        self.special_ids = set(self.tokenizer.all_special_ids) | {
            i for i, t in getattr(self.tokenizer, "added_tokens_decoder", {}).items() if getattr(t, "special", False)}
        self.special_strings = sorted(
            {t for t in self.tokenizer.all_special_tokens}
            | {t.content for t in getattr(self.tokenizer, "added_tokens_decoder", {}).values() if getattr(t, "special", False)},
            key=len, reverse=True)
        self._special_re = re.compile("|".join(map(re.escape, self.special_strings))) if self.special_strings else None
        self._turn_re: re.Pattern | None | bool = False  # turn_tokens(): computed on first use
        self._answer_tail: str | None | bool = False  # answer_tail.learn_tail: on first use
        self._longest_token: int | None | bool = False  # length_bound.refuse_over_floor: on first use

    def turn_tokens(self) -> re.Pattern | None:
        """The special strings a record's text must not hold (control_tokens.turn_tokens), computed once."""
        if self._turn_re is False:
            from .control_tokens import turn_tokens

            self._turn_re, self._media_marks = turn_tokens(self)
        return self._turn_re

    def _check_text(self, record: Record) -> None:
        turn = self.turn_tokens()
        if turn is None:
            return
        texts = [(m.get("role"), p["text"]) for m in record.messages for p in content_parts(m.get("content"))
                 if p.get("type") == "text" and isinstance(p.get("text"), str)] + tool_texts(record)
        for role, text in texts:
            hit = turn.search(text)
            if hit:
                from .control_tokens import special_token_error

                raise special_token_error(hit.group(0), role, record.where(), self._media_marks, self.placeholder)

    # ------------------------------------------------------------------ rendering
    def _template_messages(self, messages: list[dict], record: Record | None = None) -> list[dict]:
        """Messages as the chat template wants them: media parts reduced to {"type": kind}; plain
        strings for text-only tokenizers (their templates expect `content` to be a string); tool calls and
        `record`'s tools as the template reads them (tool_render.py)."""
        out = []
        if self.system_prompt and not (messages and messages[0]["role"] == "system"):
            out.append({"role": "system", "content": self._content([{"type": "text", "text": self.system_prompt}])})
        for m in messages:
            out.append(template_message(m, self._content(content_parts(m["content"]))))
        return with_tools(self, out, record)

    def _content(self, parts):
        if self.text_only:
            return part_text(parts)
        return [{"type": "text", "text": p.get("text", "")} if p["type"] == "text" else {"type": p["type"]}
                for p in parts]

    def render(self, tmessages: list[dict], add_generation_prompt: bool = False) -> str:
        return _render(self, tmessages, add_generation_prompt)

    def _trained_text(self, tmessages: list[dict], record: Record) -> tuple[str, list[tuple[int, int]]]:
        """The rendered conversation as training sees it, and the character spans [start, end) of every
        assistant answer + its stop token. A template that writes no special token after an answer
        (LLaVA-1.5-hf's: "ASSISTANT: red USER: ...") would train no stop, so the model would never learn
        to end its answer: the tokenizer's eos (the token generation stops at) is written right after
        such an answer, inside its span. Templates that end turns themselves (<|im_end|>) are unchanged.
        `encode` and `measure` both tokenize this text, so their lengths agree."""
        full = self.render(tmessages)
        spans = self._answer_spans(tmessages, full, record)
        eos = self.tokenizer.eos_token
        if not eos:  # nothing to stop at: the doctor's MM063 says so
            return full, [s if s == HISTORY else s[:2] for s in spans]
        out, moved, shift = [], [], 0
        at = 0
        for span in spans:
            if span == HISTORY:  # kept in place (trained_only pairs spans with turns), dropped in prepare
                moved.append(span)
                continue
            start, end, has_stop = span
            out.append(full[at:end])
            if has_stop:
                moved.append((start + shift, end + shift))
            else:
                out.append(eos)
                moved.append((start + shift, end + shift + len(eos)))
                shift += len(eos)
            at = end
        out.append(full[at:])
        return "".join(out), moved

    def _answer_spans(self, tmessages: list[dict], full: str, record: Record) -> list[tuple[int, int, bool]]:
        """Character spans [start, end) in `full` of every assistant answer + its end-of-turn token, and
        whether the template wrote such a token. Renders per answer: its prompt, and the conversation up to
        it unless that is `full`; the last answer mostly with no render of its own (answer_tail.py: a one-answer
        record costs 1 render); the prefix without the generation prompt only where the generation prompt does
        not lead to it."""
        spans = []
        last = len(tmessages) - 1
        self._too_many_turns(tmessages, full, record)
        for i, m in enumerate(tmessages):
            if m["role"] != "assistant":
                continue
            upto = full if i == last else self.render(tmessages[: i + 1])
            if not full.startswith(upto):  # rewritten once a later turn follows (Qwen3's think blocks)
                spans.append(history_answer(self, tmessages, i, full, record))
                continue
            answer = m["content"] if isinstance(m["content"], str) else part_text(m["content"])
            # a call turn's answer is what the template writes for it (tool_render.py)
            answer = call_text(self, tmessages, i, upto, record.where()) if m.get("tool_calls") else answer.strip()
            start = last_answer_start(self, full, answer) if i == last else -1  # no prompt render (answer_tail.py)
            if start < 0:
                prompt = self.render(tmessages[:i], add_generation_prompt=True)
                start = upto.find(answer, len(prompt)) if upto.startswith(prompt) else -1
            if start < 0:  # templates whose generation prompt differs from an assistant turn's header
                before = self.render(tmessages[:i]) if i else ""
                start = upto.rfind(answer, len(before))
            end = start + len(answer)
            if start < 0 and (found := rewritten_answer(self, tmessages, i, upto, answer, record)):  # re-spaced think block
                start, end = found
            if not answer or start < 0:
                raise BadRecord("no answer", f"assistant turn {i} has no answer text the template renders", record.where(),
                                "give every assistant turn a non-empty text answer")
            tail = upto[end:]
            stripped = tail.lstrip(" ")
            # the end-of-turn token, if the template puts one right after (the longest special string that
            # starts `stripped`: the alternatives are tried longest first)
            stop = self._special_re.match(stripped) if self._special_re is not None else None
            has_stop = stop is not None
            if has_stop:
                end += len(tail) - len(stripped) + len(stop.group())
            spans.append((start, end, has_stop))
        return spans

    def _too_many_turns(self, tmessages: list[dict], full: str, record: Record) -> None:
        """Each answer's span renders the conversation up to it, so the cost grows with the square of the
        turns (800 turns: 16 s here; 5,000: hours, a hang in effect). A conversation of many answers whose
        rendered text alone (media expand it further) is past data.max_length is refused first, from one
        tokenization, as the "too long" it is."""
        if sum(1 for m in tmessages if m["role"] == "assistant") <= MANY_ANSWERS:
            return
        n = len(self.tokenizer(full, add_special_tokens=False)["input_ids"])
        if n > self.max_length:
            raise BadRecord("too long", f"record is at least {n} tokens ({len(tmessages)} turns), over "
                            f"data.max_length={self.max_length}; it is not truncated", record.where(),
                            f"raise data.max_length to at least {n}, split the conversation, or set "
                            "data.on_bad_record=skip to drop such records (they are counted)")

    # ------------------------------------------------------------------ media
    def _check_media(self, record: Record, tmessages, full: str) -> None:
        parts = record.media_parts()
        for kind in MEDIA_TYPES:
            n = sum(1 for p in parts if p["type"] == kind)
            if n and kind not in self.modalities:
                raise BadRecord("unsupported modality", f"record has {n} {kind} part(s) but this model takes "
                                f"{'/'.join(sorted(self.modalities))} only", record.where(),
                                f"use a model that accepts {kind}, or remove those parts")
            ph = self.placeholder.get(kind)
            if ph and kind in self.modalities:
                found = full.count(ph)
                if found != n:
                    raise BadRecord("placeholder mismatch",
                                    f"{n} {kind} part(s) but {found} {ph!r} placeholder(s) in the rendered prompt",
                                    record.where(),
                                    f"remove literal {ph!r} from the record's text: mmtune inserts one placeholder "
                                    f"per {kind} part itself")

    def _load_media(self, record: Record) -> dict:
        from . import media
        from .audio_in_video import check_record
        from .video_timing import video_timing

        where = record.where()
        mc = self.media
        check_record(record)  # both kinds of video in one record: no forward flag positions both
        images, videos, clips, audio, audio_from_video = [], [], [], [], []
        for p in record.media_parts():
            if p["type"] == "image":
                images.append(media.load_image(p, where))
            elif p["type"] == "video":
                clip = media.load_video(p, where, n_frames=mc.video_frames, fps=mc.video_fps,
                                        max_pixels=mc.frame_max_pixels)
                videos.append(clip.as_array())
                clips.append(clip)
                if p.get("use_audio"):
                    audio.append(self._checked_audio(media.load_audio(p, where, self.sampling_rate), p, record))
                    audio_from_video.append(len(videos) - 1)
            elif p["type"] == "audio":
                audio.append(self._checked_audio(media.load_audio(p, where, self.sampling_rate), p, record))
                audio_from_video.append(None)
        kwargs: dict = {}
        if images:
            kwargs["images"] = images
        if videos:
            kwargs["videos"] = videos
            kwargs.update(video_timing(self.processor, clips))
        if audio:
            kwargs["audio"] = audio
            kwargs["sampling_rate"] = self.sampling_rate
        if any(i is not None for i in audio_from_video):
            from ..compat.transformers_internals import interleaves_video_audio

            if not interleaves_video_audio(self.processor):
                raise BadRecord("unsupported modality", "a video part asks for its audio track (use_audio) but this "
                                "model's processor cannot interleave a video's audio", where,
                                "drop use_audio, or use an omni model (e.g. Qwen2.5-Omni)")
            kwargs["load_audio_from_video"] = True
            kwargs["audio_from_video_indices"] = audio_from_video
        return kwargs

    def _checked_audio(self, wave, part, record):
        seconds = len(wave) / self.sampling_rate
        # Under 4 mel frames the audio tower's two stride-2 steps leave no token: the processor drops the
        # placeholder and the record's text no longer lines up (measured and encoded alike: one reason).
        shortest = 4 * int(getattr(audio_extractor(self.processor), "hop_length", 160) or 160)
        if len(wave) < shortest:
            raise BadRecord("audio too short", f"audio {part.get('path', '<in-memory>')} holds {len(wave)} samples "
                            f"({seconds * 1000:.1f} ms), under the {shortest} this model's audio encoder needs for "
                            "one token", record.where(), "give a longer clip, or set data.on_bad_record=skip")
        cap = self.media.audio_max_seconds
        if seconds > cap:
            raise BadRecord("too long", f"audio {part.get('path', '<in-memory>')} lasts {seconds:.1f} s, over "
                            f"model.audio_max_seconds={cap:g}", record.where(),
                            "trim the clip, or raise model.audio_max_seconds if the model takes longer audio")
        return wave

    # ------------------------------------------------------------------ tokens
    def _add_special(self, text: str) -> bool:
        # Chat templates usually write BOS themselves; adding it again doubles it (same rule as
        # transformers' own apply_chat_template(tokenize=True)).
        bos = self.tokenizer.bos_token
        return not (bos is not None and text.startswith(bos))

    def _run(self, text: str, record: Record, media_kwargs: dict) -> dict:
        add = self._add_special(text)
        if self.text_only:
            out = self.tokenizer(text, add_special_tokens=add, return_tensors="pt")
        else:
            try:
                out = self.processor(text=[text], add_special_tokens=add, return_tensors="pt", **media_kwargs)
            except (ValueError, TypeError, RuntimeError) as e:
                raise BadRecord("processor error", f"the processor rejected the record: {e}", record.where(),
                                "check the record's media (sizes, frame counts) against the model's processor") from None
        return with_frames_mask(dict(out), self.family)

    def _text_tokens(self, text: str) -> dict:
        """The tokenizer's encoding of `text` with each token's character offsets (what the label mask is
        computed from), each key an int64 numpy array: np.asarray of the lists, not the tokenizer's
        return_tensors (torch.tensor() of the (tokens, 2) offset lists alone cost ~0.5 ms for a 1,000-token
        record; "np" costs twice the lists on a short one)."""
        import numpy as np

        enc = self.tokenizer(text, add_special_tokens=self._add_special(text), return_offsets_mapping=True)
        return {k: np.asarray(v, dtype=np.int64) for k, v in enc.items()}

    def _aligned_labels(self, text: str, spans, expanded_ids, record: Record, tokens=None):
        """Labels over `expanded_ids` (the processor's input_ids, 1-D): answer tokens keep their id, everything
        else is -100. `tokens`: `_text_tokens(text)` where the caller has it already. An int64 array.

        Vectorised (numpy): a token is an answer token when its characters overlap an answer span; the
        tokenizer's ids form literal text segments separated by runs of placeholder tokens (a run counts as
        one: their expansions are all masked anyway), and each segment is found in the processor's ids."""
        import numpy as np

        enc = tokens if tokens is not None else self._text_tokens(text)
        ids = np.asarray(enc["input_ids"], dtype=np.int64).reshape(-1)
        offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        start, end = offsets[:, 0], offsets[:, 1]
        in_answer = np.zeros(len(ids), dtype=bool)
        for a0, a1 in spans:
            in_answer |= (a0 < end) & (start < a1)
        in_answer &= end > start
        is_media = np.zeros(len(ids), dtype=bool)
        # the placeholder's own id too where it differs from its expansion's (Gemma 3: <start_of_image>)
        for tid in set(self.media_token_id.values()) | set(self.placeholder_ids.values()):
            is_media |= ids == tid
        E = np.asarray(expanded_ids, dtype=np.int64).reshape(-1)
        if not is_media.any() and np.array_equal(ids, E):  # no placeholder: one segment, the ids themselves
            # (what the segment walk below gives for it, without its per-segment work: ~40 us a record)
            return np.where(in_answer, E, -100)
        starts = is_media.copy()
        starts[1:] &= ~is_media[:-1]
        ends = is_media.copy()
        ends[:-1] &= ~is_media[1:]
        # segment k: positions [lo[k], hi[k]) of `ids`, between placeholder runs k-1 and k
        lo = [0] + (np.flatnonzero(ends) + 1).tolist()
        hi = np.flatnonzero(starts).tolist() + [len(ids)]
        n = len(E)
        labels = np.full(n, -100, dtype=np.int64)

        def fail(what: str):
            return DataError(f"cannot line up the processor's tokens with the tokenizer's ({what})",
                             where=record.where(),
                             fix="this processor changes text beyond expanding media placeholders; report the model to mmtune")

        j, last = 0, len(lo) - 1
        for k, (a, b) in enumerate(zip(lo, hi)):
            want, size = ids[a:b], b - a
            if k == 0:
                at = 0
            elif k == last:
                at = n - size  # the last segment ends the sequence
            elif size:
                # A placeholder expanded into at least one token, possibly with text of its own (Qwen3-VL
                # writes frame timestamps): the next literal segment is where the text continues.
                found = np.flatnonzero(E[j + 1:n - size + 1] == want[0]) + (j + 1)
                at = next((int(c) for c in found if np.array_equal(E[c:c + size], want)), -1)
            else:
                at = j + 1
            if at < j or not np.array_equal(E[at:at + size], want) or (k > 0 and at == j):
                raise fail(f"segment {k} of {last + 1} not found")
            keep = in_answer[a:b]
            labels[at:at + size][keep] = want[keep]
            j = at + size
        if j != n and (last == 0 or hi[-1] > lo[-1]):
            raise fail(f"ended at token {j} of {n}")
        return labels

    def _finish(self, out: dict, record: Record) -> dict:
        n = out["input_ids"].shape[-1]
        res = {}
        for k, v in out.items():
            if not hasattr(v, "shape"):
                import torch

                v = torch.as_tensor(v)
            if k in TOKEN_KEYS or (v.dim() == 2 and v.shape[0] == 1 and v.shape[1] == n and k not in
                                   ("feature_attention_mask",)):
                res[k] = v.reshape(-1)
            else:
                res[k] = v
        from .audio_in_video import mark

        return mark(res, record)  # a video's own audio track: the collator gives the forward use_audio_in_video

    def _check_length(self, n: int, record: Record) -> None:
        if n > self.max_length:
            media = ", ".join(f"{sum(1 for p in record.media_parts() if p['type'] == k)} {k}" for k in MEDIA_TYPES
                              if any(p["type"] == k for p in record.media_parts()))
            raise BadRecord("too long", f"record is {n} tokens{' (with ' + media + ')' if media else ''}, over "
                            f"data.max_length={self.max_length}; it is not truncated, which could cut media tokens",
                            record.where(),
                            f"raise data.max_length to at least {n}, lower model.max_pixels / model.video_frames, "
                            "or set data.on_bad_record=skip to drop such records (they are counted)")

    @isolated_method
    def encode(self, record: Record, *, check_length: bool = True) -> dict:
        if record.document:  # raw text: its tokens, no template (data/documents.py)
            return encode_document(self, record, check_length)
        full, spans, media_kwargs = self.prepare(record)
        if check_length:
            refuse_over_floor(self, full, record)
        tokens = None
        if self.text_only:  # the tokenizer is the processor (no media: _check_media refused any): one
            # tokenization gives the ids and the offsets the labels need
            tokens = self._text_tokens(full)
            out = self.text_tensors(tokens)
        else:
            out = self._run(full, record, media_kwargs)
        return self.complete(record, full, spans, out, tokens, check_length=check_length)

    def prepare(self, record: Record) -> tuple[str, list, dict | None]:
        """A record's per-record work before its processor call: (the trained text, its answer spans, the
        processor's media kwargs: None for a text-only model). Raises the record's BadRecord."""
        if last_assistant_index(record.messages) is None:
            raise BadRecord("no answer", "record has no assistant turn", record.where(),
                            "end the conversation with an assistant message holding the answer")
        self._check_text(record)
        tmessages = self._template_messages(record.messages, record)
        full, spans = trained_only(*self._trained_text(tmessages, record), record)
        spans = [s for s in spans if s != HISTORY]  # answers the template rewrites in history: context
        self._check_media(record, tmessages, full)
        return full, spans, None if self.text_only else self._load_media(record)

    @staticmethod
    def text_tensors(tokens: dict) -> dict:
        import torch

        return {k: torch.from_numpy(v).reshape(1, -1) for k, v in tokens.items() if k != "offset_mapping"}

    def complete(self, record: Record, full: str, spans, out: dict, tokens=None, *, check_length: bool = True) -> dict:
        """The processor's output for one record (each per-token key (1, tokens)) -> its encoding, labels added."""
        import torch

        ids = out["input_ids"][0]
        if check_length:
            self._check_length(int(ids.shape[0]), record)
        labels = self._aligned_labels(full, spans, ids.numpy(), record, tokens=tokens)
        res = self._finish(out, record)
        res["labels"] = torch.from_numpy(labels)
        return res

    @isolated_method
    def encode_prompt(self, record: Record) -> dict:
        """The prompt only (everything before the last assistant turn), with the generation prompt."""
        i = last_assistant_index(record.messages)
        msgs = record.messages[:i] if i is not None else record.messages
        tmessages = self._template_messages(msgs, record)
        text = self.render(tmessages, add_generation_prompt=True)
        prompt_record = Record(record.id, record.source, msgs)
        self._check_media(prompt_record, tmessages, text)
        out = self._run(text, record, self._load_media(prompt_record))
        return self._finish(out, record)

    def answer_text(self, record: Record) -> str:
        call = reference(self, record)  # a call as the template writes it (tool_render.py)
        return _answer_text(record) if call is None else call

    def token_counts(self, record: Record) -> dict:
        """Tokens of each kind in the encoded record, counted from the placeholder ids in input_ids."""
        ids = self.encode(record, check_length=False)["input_ids"]
        counts = {k: int((ids == self.media_token_id[k]).sum()) if k in self.media_token_id else 0
                  for k in MEDIA_TYPES}
        total = int(ids.numel())
        return {"text": total - sum(counts.values()), **counts, "total": total}

    # ------------------------------------------------------------------ lengths without pixels
    @isolated_method
    def measure(self, record: Record) -> dict:
        """`token_counts(record)` without decoding pixels or samples: media sizes from file headers,
        tokens per item from the processor's own arithmetic, text from the tokenizer. The same checks
        as `encode` (answer present, placeholders, modalities, audio length, short videos) raise the
        same BadRecords. Where that arithmetic cannot be exact (Qwen3-VL writes frame timestamps as text, from
        each clip's real timing; a video's own audio track is interleaved) the record is encoded in full
        instead. The text is `_trained_text`'s, stop tokens the encoder adds included.
        tests/data/test_lengths.py asserts measure == token_counts for every family and modality."""
        if record.document:
            return measure_document(self, record)
        if last_assistant_index(record.messages) is None:
            raise BadRecord("no answer", "record has no assistant turn", record.where(),
                            "end the conversation with an assistant message holding the answer")
        self._check_text(record)
        tmessages = self._template_messages(record.messages, record)
        full, _ = self._trained_text(tmessages, record)
        refuse_over_floor(self, full, record)  # before tokenizing: length_bound.py
        parts = record.media_parts()
        if parts and self.family is not None and self.family.expansion_adds_text:
            return self.token_counts(record)
        if any(p["type"] == "video" for p in parts) and (self.family is None or self.family.video_timestamps_in_text
                                                         or self.media.video_fps
                                                         or any(p.get("use_audio") for p in parts)):
            return self.token_counts(record)
        self._check_media(record, tmessages, full)
        from ..compat import CompatError

        try:
            per_item = self._media_token_counts(record, parts)
        except CompatError:  # this transformers cannot count without pixels: encode (same answer, slower)
            return self.token_counts(record)
        ids = self.tokenizer(full, add_special_tokens=self._add_special(full))["input_ids"]
        counts = {k: 0 for k in MEDIA_TYPES}
        total = len(ids)
        for kind, tokens in per_item.items():
            counts[kind] = sum(tokens)
            total += sum(tokens) - len(tokens)  # each placeholder token becomes its expansion
        return {"text": total - sum(counts.values()), **counts, "total": total}

    def _media_token_counts(self, record: Record, parts) -> dict[str, list[int]]:
        from ..compat.processors import has_media_token_arithmetic, num_media_tokens
        from . import media_probe

        where = record.where()
        mc = self.media
        sizes: dict[str, list] = {k: [] for k in MEDIA_TYPES}
        from .media import check_regular

        for p in parts:
            check_regular(p, where, folder_ok=p["type"] == "video")  # a named pipe would hang the header read
            try:
                if p["type"] == "image":
                    sizes["image"].append(media_probe.image_size(p, where))
                elif p["type"] == "video":
                    n, h, w = media_probe.video_shape(p, mc.video_frames, mc.video_fps, where=where)
                    if mc.frame_max_pixels and h * w > mc.frame_max_pixels:  # the loader downsizes frames first
                        from .media import capped_size

                        w, h = capped_size(w, h, mc.frame_max_pixels)
                    sizes["video"].append((n, h, w))
                elif p["type"] == "audio":
                    seconds = media_probe.audio_seconds(p)
                    if seconds > mc.audio_max_seconds or seconds * self.sampling_rate < 4000:  # (the short end)
                        self._checked_audio(range(int(round(seconds * self.sampling_rate))), p, record)
                    sizes["audio"].append(int(round(seconds * self.sampling_rate)))
            except BadRecord:
                raise
            except DataError as e:
                from .records import media_label

                reason = "missing media" if e.what.startswith("missing") else "corrupt media"
                raise BadRecord(reason, f"{media_label(p)}: {e.what}", where, e.fix) from None
        out = {k: [] for k in MEDIA_TYPES}
        if sizes["image"] or sizes["video"] or (sizes["audio"] and has_media_token_arithmetic(self.processor)
                                                  and self.family is not None and not self.family.audio_tokens_by_whisper):
            audio_lengths = sizes["audio"] if self.family is None or not self.family.audio_tokens_by_whisper else None
            # The count depends only on the sizes and the run's caps (fixed for this encoder): memoised, since
            # the processor's kwarg validation costs ~0.4 ms a call and VQA sets repeat image sizes.
            key = (tuple(sizes["image"]), tuple(sizes["video"]), tuple(audio_lengths or ()))
            got = self._count_memo.get(key)
            if got is None:
                try:
                    got = num_media_tokens(self.processor, image_sizes=sizes["image"], video_sizes=sizes["video"],
                                           audio_lengths=audio_lengths)
                except (ValueError, TypeError, RuntimeError) as e:  # what `_run` reports for the real call
                    raise BadRecord("processor error", f"the processor rejected the record: {e}", where,
                                    "check the record's media (sizes, frame counts) against the model's processor") from None
                if len(self._count_memo) < 100_000:
                    self._count_memo[key] = got
            out.update({k: list(v) for k, v in got.items() if v})
        if sizes["audio"] and not out["audio"]:
            out["audio"] = [whisper_audio_tokens(n, audio_extractor(self.processor)) for n in sizes["audio"]]
        return out

    def rendered(self, record: Record) -> str:
        """The text training tokenizes (the template's rendering plus any stop token the encoder adds)."""
        return self._trained_text(self._template_messages(record.messages, record), record)[0]
