"""One base for an objective's wrappers of the run's Encoder / Collator (data/preference.py, data/prompts.py):
what the wrapper does not define is the wrapped object's (tokenizer, media_token_id, pad rules, ...)."""

from __future__ import annotations


class Forwarding:
    wrapped = ""  # the name of the attribute that holds the wrapped object

    def __getattr__(self, name):
        # Unpickling (spawned measuring processes) asks for dunders and the wrapped attribute before it is set.
        if name.startswith("__") or name == self.wrapped:
            raise AttributeError(name)
        return getattr(getattr(self, self.wrapped), name)
