"""Hub models whose files are gated: a download needs a token of an account that accepted the model's terms.

Without one the Hub answers 401 / 403 ("Access to model meta-llama/... is restricted. You must have access to it
and be authenticated to access it"), and in a training run that happens where the model is first fetched, on the
rented GPU machine. Whether a repo is gated is the Hub's to say and cannot be asked offline, so this names only the
families published gated from the start (Meta's Llama repos under the Llama community license, Google's Gemma
repos under the Gemma terms), and says nothing of other repos. Whether a token exists is read on disk only
(huggingface_hub.get_token: HF_TOKEN, then the file `hf auth login` writes), never sent anywhere; whether its
account accepted the terms cannot be known before the download.
Sources: https://github.com/ariG23498/gemma3-object-detection/issues/5, https://github.com/huggingface/transformers/issues/29177,
https://github.com/rh-ai-quickstart/ai-virtual-agent/issues/200.
"""

from __future__ import annotations


def gated_terms(repo_id: str) -> str | None:
    """Whose terms gate `repo_id` (a Hub id), or None when it is not one of the families known to be gated."""
    org, _, name = repo_id.partition("/")
    if org == "meta-llama":
        return "Meta's Llama community license"
    if org == "google" and "gemma" in name.lower():  # gemma-*, paligemma*, medgemma*, shieldgemma*
        return "Google's Gemma terms of use"
    return None


def has_token() -> bool:
    """Whether huggingface_hub would send a token: HF_TOKEN / HUGGING_FACE_HUB_TOKEN or the saved login."""
    from huggingface_hub import get_token

    return bool(get_token())


def gated_without_token(repo_id: str) -> tuple[str, str] | None:
    """(what, fix) when `repo_id` is gated and no token is set here: its download will be refused."""
    terms = gated_terms(repo_id)
    if terms is None or has_token():
        return None
    from huggingface_hub import constants

    return (f"{repo_id} is a gated model ({terms}) and no Hugging Face token is set here (HF_TOKEN unset, no "
            "saved login): its download will be refused with 401 'Access to model ... is restricted'",
            f"accept the terms at https://huggingface.co/{repo_id} with your account, then `hf auth login` (or set "
            f"HF_TOKEN to a read token of that account; the login is saved in {constants.HF_TOKEN_PATH})")
