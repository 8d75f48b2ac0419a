"""Write the look-alike preference pairs the DPO recipe points at, in RLAIF-V's columns.

    python recipes/data/make_preference.py   # writes recipes/data/image_pairs.jsonl (after make_examples.py)

RLAIF-V (openbmb/RLAIF-V-Dataset) rows carry `image`, `question`, `chosen`, `rejected` and bookkeeping
columns (`ds_name`, `origin_dataset`, `idx`); these pairs reuse the example images of image_qa.jsonl: the
chosen answer states the right count, the rejected one a wrong count (a hallucinated object count, the kind
of error RLAIF-V's pairs teach against). Enough for `--smoke`, not for training.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent


def main() -> None:
    rng = random.Random(0)
    rows = []
    for line in (HERE / "image_qa.jsonl").read_text().splitlines():
        rec = json.loads(line)
        user, answer = rec["messages"][0]["content"], rec["messages"][1]["content"][0]["text"]
        image = next(p["path"] for p in user if p["type"] == "image")
        question = next(p["text"] for p in user if p["type"] == "text")
        colour = question.split()[2]
        n = int(answer)
        wrong = rng.choice([k for k in range(1, 7) if k != n])
        rows.append({"ds_name": "look-alike", "idx": rec["id"], "image": image, "question": question,
                     "chosen": f"There are {n} {colour} circles.", "rejected": f"There are {wrong} {colour} circles.",
                     "origin_dataset": "recipes/data/image_qa.jsonl"})
    with open(HERE / "image_pairs.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"wrote {len(rows)} preference pairs to {HERE / 'image_pairs.jsonl'}")


if __name__ == "__main__":
    main()
