"""The data pipeline: records from files or synthetic sets, media decoding, encoding with the model's
own processor (chat template + label mask), collation. Nothing heavy is imported here."""
