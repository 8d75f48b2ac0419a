"""Audio graft (seed 000's): a Whisper encoder + any causal LM -> a real Qwen2AudioForConditionalGeneration."""

import torch

from mmtune.models.compose import compose_audio, save_composed
from mmtune.models.examples import example_batch


def parts():
    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperModel

    from mmtune.models.tiny import build_tiny

    torch.manual_seed(3)
    whisper = WhisperModel(WhisperConfig(num_mel_bins=32, d_model=32, encoder_layers=2, encoder_attention_heads=2,
                                         encoder_ffn_dim=64, decoder_layers=1, decoder_attention_heads=2,
                                         decoder_ffn_dim=64, max_source_positions=1500, vocab_size=100,
                                         pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1))
    fe = WhisperFeatureExtractor(feature_size=32)
    lm, tok = build_tiny("tiny/qwen2", seed=4)
    return whisper, fe, lm, tok


def test_compose_audio_copies_parts_trains_and_reloads(tmp_path):
    from transformers import Qwen2AudioForConditionalGeneration

    from mmtune.build import load_model
    from mmtune.config.schema import RunConfig

    whisper, fe, lm, tok = parts()
    c = compose_audio(whisper, lm, tokenizer=tok, feature_extractor=fe)
    m = c.model
    assert type(m).__name__ == "Qwen2AudioForConditionalGeneration"
    for k, v in whisper.get_encoder().state_dict().items():
        torch.testing.assert_close(m.model.audio_tower.state_dict()[k], v)
    assert all(p.device.type == "cpu" for p in m.parameters())  # never meta (failure mode 8)
    ids = torch.tensor([[3, 17, 42, 99]])
    with torch.no_grad():
        torch.testing.assert_close(m(input_ids=ids).logits, lm(input_ids=ids).logits)  # text path = the LM
    batch = example_batch(c.processor, ("audio",))
    out = m(**batch)
    out.loss.backward()
    assert torch.isfinite(out.loss) and m.model.multi_modal_projector.linear.weight.grad.abs().sum() > 0

    save_composed(c, tmp_path / "graft")
    again = Qwen2AudioForConditionalGeneration.from_pretrained(str(tmp_path / "graft"))
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids).logits, m(input_ids=ids).logits)
    loaded = load_model(RunConfig(model={"name": str(tmp_path / "graft")}), device="cpu", dtype=torch.float32)
    assert loaded.family.name == "qwen2_audio"
