"""`mmtune export --push-to-hub ORG/NAME`: the export folder uploaded through huggingface_hub. Every way it
cannot happen (offline, no token, no access, no network) is an error naming what to do; the export itself
is already complete on disk by then, so nothing is lost."""

from __future__ import annotations

from pathlib import Path

from ..errors import MMTuneError


def check_repo_id(repo_id: str) -> None:
    """Before anything is exported: a repo id that cannot be right."""
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise MMTuneError(f"--push-to-hub {repo_id}: a Hub repo id is ORG/NAME", where="--push-to-hub",
                          fix="e.g. --push-to-hub my-org/qwen2-vl-counting")


def push(folder: Path, repo_id: str, *, private: bool = False) -> str:
    """Uploads `folder` to the model repo `repo_id` (created if missing) -> the repo's URL."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub import errors as hub_errors

    from . import MARKER

    later = f"the export is complete at {folder}; upload it later with: hf upload {repo_id} {folder} ."
    check_repo_id(repo_id)
    if constants.HF_HUB_OFFLINE:
        raise MMTuneError("cannot push to the Hugging Face Hub: offline mode is on (HF_HUB_OFFLINE=1)",
                          where="--push-to-hub", fix=f"unset HF_HUB_OFFLINE on a machine with network; {later}")
    # Transport errors: huggingface_hub's HTTP client's base class where it has one (httpx-based versions),
    # OSError otherwise (requests-based versions raise IOError subclasses).
    from ..models.gated import has_token

    if not has_token():  # huggingface_hub would send the requests anyway and read the Hub's 401 as a bad token
        raise MMTuneError("cannot push to the Hugging Face Hub: no token is set here (HF_TOKEN unset, no saved "
                          "login); nothing was sent", where="--push-to-hub",
                          fix=f"hf auth login (or set HF_TOKEN to a token with write access); {later}")
    network = tuple(c for c in (getattr(hub_errors, "HTTPError", None), OSError) if c is not None)
    api = HfApi()
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                          commit_message="mmtune export", ignore_patterns=[MARKER])  # the marker holds local paths
    except hub_errors.LocalTokenNotFoundError:
        raise MMTuneError("cannot push to the Hugging Face Hub: no token", where="--push-to-hub",
                          fix=f"hf auth login (or set HF_TOKEN to a token with write access); {later}") from None
    except hub_errors.HfHubHTTPError as e:
        status = getattr(getattr(e, "response", None), "status_code", None)
        if status in (401, 403):
            raise MMTuneError(f"the Hub refused the upload to {repo_id} ({status}): the token cannot write there",
                              where="--push-to-hub", fix=f"hf auth login with a write token for {repo_id.split('/')[0]}; "
                                                         f"{later}") from None
        raise MMTuneError(f"the Hub refused the upload to {repo_id}: {e}", where="--push-to-hub", fix=later) from None
    except hub_errors.OfflineModeIsEnabled:
        raise MMTuneError("cannot push to the Hugging Face Hub: offline mode is on", where="--push-to-hub",
                          fix=f"unset HF_HUB_OFFLINE; {later}") from None
    except network as e:
        raise MMTuneError(f"cannot reach the Hugging Face Hub ({constants.ENDPOINT}): {type(e).__name__}: {e}",
                          where="--push-to-hub", fix=f"check the network (or HF_ENDPOINT); {later}") from None
    return f"{constants.ENDPOINT}/{repo_id}"
