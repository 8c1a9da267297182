"""Small randomly initialised Hugging Face models saved as safetensors (no download),
the references of the model parity gates. Test-only: needs torch and transformers."""
import json
import os

import numpy as np
import tokenizers

VOCAB = 300


def configs():
    import transformers as tf

    common = dict(vocab_size=VOCAB, num_hidden_layers=2, max_position_embeddings=256,
                  bos_token_id=None, eos_token_id=None, pad_token_id=None)
    llama = dict(common, hidden_size=96, intermediate_size=160, num_attention_heads=6,
                 num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5, initializer_range=0.08)
    qwen3 = dict(common, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=128, tie_word_embeddings=False,
                 initializer_range=0.08)
    qwen2 = dict(common, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                 num_key_value_heads=2, tie_word_embeddings=False, initializer_range=0.08)
    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
            "original_max_position_embeddings": 32}
    return {
        # GQA 6:2, tied embeddings.
        "llama": tf.LlamaConfig(**llama, tie_word_embeddings=True, rope_theta=1e5),
        # Llama 3.1 frequency scaling with a short original context, so the
        # interpolated band covers the rotary frequencies used here.
        "llama3": tf.LlamaConfig(**llama, tie_word_embeddings=True, rope_parameters={
            "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
        # Linear position interpolation (Mistral/CodeLlama-style long context).
        "llama_linear": tf.LlamaConfig(**llama, tie_word_embeddings=True, rope_parameters={
            "rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}),
        "qwen3": tf.Qwen3Config(**qwen3),
        "qwen2": tf.Qwen2Config(**qwen2),
        # Qwen's long-context recipe with the original context below the prompts, so the
        # interpolated band and the attention factor (0.1 ln 4 + 1) bite.
        "qwen3_yarn": tf.Qwen3Config(**qwen3, rope_parameters=yarn),
        "qwen2_yarn": tf.Qwen2Config(**qwen2, rope_parameters=yarn),
        # Merged qkv_proj and gate_up_proj, untied; Phi-4-mini's partial RoPE.
        "phi3": tf.Phi3Config(**llama, tie_word_embeddings=False),
        # Phi-3-mini's window on every layer, cut to 24 positions so that it bites.
        "phi3_swa": tf.Phi3Config(**llama, tie_word_embeddings=False, sliding_window=24),
        "phi3_partial": tf.Phi3Config(**llama, tie_word_embeddings=False, rope_parameters={
            "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75}),
        # Phi-4-mini's RoPE: LongRoPE over the leading 3/4 of each head, factor 32
        # (max_position_embeddings / original_max_position_embeddings, as released) with
        # the original context cut to 64 so that a 40-token prompt runs on the short
        # factors and a 150-token one on the long; tied embeddings as released.
        "phi4_mini": tf.Phi3Config(**dict(llama, max_position_embeddings=32 * 64),
                                   tie_word_embeddings=True,
                                   original_max_position_embeddings=64, rope_parameters={
            "rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
            "short_factor": [1.0 + 0.1 * i for i in range(6)],
            "long_factor": [1.0 + 6.0 * i for i in range(6)]}),
        # Mistral 7B v0.3's layout (no window, theta 1e6, untied) and v0.1's (a window
        # on every layer, here 24 positions so that it bites on the 40- and 150-token
        # prompts), with a head_dim other than hidden / heads as NeMo has.
        "mistral": tf.MistralConfig(**dict(llama, head_dim=24), sliding_window=None,
                                    tie_word_embeddings=False, rope_theta=1e6),
        "mistral_swa": tf.MistralConfig(**dict(llama, head_dim=24), sliding_window=24,
                                        tie_word_embeddings=False, rope_theta=1e4),
        "opt": tf.OPTConfig(**common, hidden_size=64, ffn_dim=96, num_attention_heads=4,
                            word_embed_proj_dim=64, init_std=0.08),
    }


def build(name, directory):
    """Saves model ``name`` (random weights, norms and biases made non-trivial) with a
    word-level tokenizer ("t0" .. "t299") into ``directory``; returns the torch model."""
    import torch
    import transformers as tf

    torch.manual_seed(sum(map(ord, name)))
    model = tf.AutoModelForCausalLM.from_config(configs()[name]).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname and pname.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif pname.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
    model.save_pretrained(directory, safe_serialization=True)
    save_tokenizer(directory)
    return model


def save_tokenizer(directory):
    """The word-level tokenizer ("t0" .. "t299") of the tiny models, into ``directory``."""
    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({}, f)


def prompt(length, seed):
    return np.random.default_rng(seed).integers(0, VOCAB, length).tolist()
