"""The models of the conformance suite (test_conformance.py), built from real Hugging Face model
code with random weights: tiny Llama, GPT-2, Qwen2 and Mistral (8 decoder layers of width 64, 4
stages of 2 layers; stage 0 embeds token ids, the last stage ends in the LM head), and an MLP of
4 stages. `build(name)` makes the same weights in every process."""

import torch

VOCAB, WIDTH, LAYERS, STAGES = 256, 64, 8, 4
MICROBATCH, TOKENS, MICROBATCHES = 2, 64, 8


def _config(name):
    import transformers
    common = dict(vocab_size=VOCAB, tie_word_embeddings=False)
    if name == "gpt2":
        return transformers.GPT2Config(n_embd=WIDTH, n_layer=LAYERS, n_head=4,
                                       n_positions=TOKENS, resid_pdrop=0.0, embd_pdrop=0.0,
                                       attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, **common)
    llama_like = dict(hidden_size=WIDTH, intermediate_size=2 * WIDTH, num_hidden_layers=LAYERS,
                      num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=TOKENS, attention_dropout=0.0, **common)
    if name == "llama":
        return transformers.LlamaConfig(**llama_like)
    if name == "qwen2":
        return transformers.Qwen2Config(**llama_like)
    if name == "mistral":
        return transformers.MistralConfig(sliding_window=None, **llama_like)
    raise ValueError(f"unknown model {name!r}")


def _causal_lm(name):
    import transformers
    classes = {"gpt2": transformers.GPT2LMHeadModel, "llama": transformers.LlamaForCausalLM,
               "qwen2": transformers.Qwen2ForCausalLM, "mistral": transformers.MistralForCausalLM}
    return classes[name](_config(name))


class DecoderStage(torch.nn.Module):
    """Layers [first, last) of a causal LM; stage 0 embeds the token ids, the last stage applies
    the final norm and the LM head."""

    def __init__(self, model, gpt2, first_layer, last_layer, is_first, is_last):
        super().__init__()
        base = model.transformer if gpt2 else model.model
        self.gpt2, self.is_first, self.is_last = gpt2, is_first, is_last
        layers = base.h if gpt2 else base.layers
        self.layers = torch.nn.ModuleList(layers[first_layer:last_layer])
        if is_first:
            self.embed = base.wte if gpt2 else base.embed_tokens
            self.positions = base.wpe if gpt2 else None
        self.rotary = None if gpt2 else base.rotary_emb
        if is_last:
            self.norm = base.ln_f if gpt2 else base.norm
            self.head = model.lm_head

    def forward(self, x):
        tokens = x.shape[1]
        position_ids = torch.arange(tokens, device=x.device).unsqueeze(0)
        h = self.embed(x) if self.is_first else x
        if self.is_first and self.gpt2:
            h = h + self.positions(position_ids)
        kwargs = {}
        if self.rotary is not None:
            kwargs = {"position_embeddings": self.rotary(h, position_ids),
                      "position_ids": position_ids}
        for layer in self.layers:
            h = layer(h, **kwargs)
            h = h[0] if isinstance(h, tuple) else h
        if self.is_last:
            h = self.head(self.norm(h))
        return h


def _mlp_stage(stage, seed):
    generator = torch.Generator().manual_seed(seed * 1000 + stage)
    module = torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                 torch.nn.Linear(4 * WIDTH, WIDTH), torch.nn.Tanh())
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * p.shape[-1] ** -0.5)
    return module


MODELS = ("llama", "gpt2", "qwen2", "mistral", "mlp")


def build(name, seed=0):
    """(stages, batch, target, loss_fn): the 4 stage modules (model order), the whole batch of
    MICROBATCHES microbatches (token ids, or floats for the MLP) and its target."""
    generator = torch.Generator().manual_seed(seed + 7)
    if name == "mlp":
        stages = [_mlp_stage(s, seed) for s in range(STAGES)]
        batch = torch.randn(MICROBATCHES * 4 * MICROBATCH, WIDTH, generator=generator)
        target = torch.randn(batch.shape, generator=generator)
        return stages, batch, target, mse_loss
    torch.manual_seed(seed)
    model = _causal_lm(name)
    model.train()
    per = LAYERS // STAGES
    stages = [DecoderStage(model, name == "gpt2", s * per, (s + 1) * per, s == 0,
                           s == STAGES - 1) for s in range(STAGES)]
    ids = torch.randint(0, VOCAB, (MICROBATCHES * MICROBATCH, TOKENS + 1), generator=generator)
    return stages, ids[:, :-1].contiguous(), ids[:, 1:].contiguous(), lm_loss


def lm_loss(logits, target):
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())


def mse_loss(output, target):
    return torch.nn.functional.mse_loss(output, target)
