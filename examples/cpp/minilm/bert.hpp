// bert.hpp - Hugging Face's BertModel (transformers 4.40, eager attention) as a torch::nn::Module
// of the program's own, with transformers' tensor names ("embeddings.word_embeddings.weight",
// "encoder.layer.0.attention.self.query.weight", ...), so that a Hugging Face checkpoint loads by
// name. The forward is the same arithmetic in the same order as transformers', so outputs agree
// with PyTorch's to the last bits or nearly.
#pragma once

#include <torch/nn/functional/normalization.h>
#include <torch/nn/init.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

namespace bert {

struct Config {
  int64_t vocab_size = 30522, hidden = 384, layers = 6, heads = 12, intermediate = 1536;
  int64_t max_positions = 512, type_vocab = 2, pad_token_id = 0;
  double layer_norm_eps = 1e-12, initializer_range = 0.02, dropout = 0.1;
};

// config.json is one flat object; a number is found after its quoted key. Enough for Hugging Face's
// model configurations, which is all this reads.
inline std::string json_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline const char* json_value(const std::string& json, const std::string& key) {
  const auto at = json.find("\"" + key + "\"");
  if (at == std::string::npos) return nullptr;
  const auto colon = json.find(':', at);
  if (colon == std::string::npos) return nullptr;
  const char* v = json.c_str() + colon + 1;
  while (*v == ' ' || *v == '\n' || *v == '\t' || *v == '\r') ++v;
  return v;
}

inline void read_number(const std::string& json, const std::string& key, int64_t& out) {
  if (const char* v = json_value(json, key)) out = std::strtoll(v, nullptr, 10);
}
inline void read_number(const std::string& json, const std::string& key, double& out) {
  if (const char* v = json_value(json, key)) out = std::strtod(v, nullptr);
}

// A model folder's config.json: a BERT with exact GELU, or an error saying what differs.
inline Config read_config(const std::string& dir) {
  const std::string json = json_text(dir + "/config.json");
  for (const auto& [key, want] : {std::pair<const char*, const char*>{"model_type", "\"bert\""},
                                  {"hidden_act", "\"gelu\""},
                                  {"position_embedding_type", "\"absolute\""}}) {
    const char* v = json_value(json, key);
    if (v && std::string(v).rfind(want, 0) != 0)
      throw std::runtime_error(dir + "/config.json: " + key + " is not " + want);
  }
  Config c;
  read_number(json, "vocab_size", c.vocab_size);
  read_number(json, "hidden_size", c.hidden);
  read_number(json, "num_hidden_layers", c.layers);
  read_number(json, "num_attention_heads", c.heads);
  read_number(json, "intermediate_size", c.intermediate);
  read_number(json, "max_position_embeddings", c.max_positions);
  read_number(json, "type_vocab_size", c.type_vocab);
  read_number(json, "pad_token_id", c.pad_token_id);
  read_number(json, "layer_norm_eps", c.layer_norm_eps);
  read_number(json, "initializer_range", c.initializer_range);
  read_number(json, "hidden_dropout_prob", c.dropout);
  if (c.hidden % c.heads != 0) throw std::runtime_error("hidden_size is not a multiple of heads");
  return c;
}

inline torch::nn::LayerNorm layer_norm(const Config& c) {
  return torch::nn::LayerNorm(
      torch::nn::LayerNormOptions({c.hidden}).eps(c.layer_norm_eps).elementwise_affine(true));
}

struct Embeddings : torch::nn::Module {
  explicit Embeddings(const Config& c)
      : word_embeddings(
            register_module("word_embeddings", torch::nn::Embedding(c.vocab_size, c.hidden))),
        position_embeddings(register_module("position_embeddings",
                                            torch::nn::Embedding(c.max_positions, c.hidden))),
        token_type_embeddings(
            register_module("token_type_embeddings", torch::nn::Embedding(c.type_vocab, c.hidden))),
        LayerNorm(register_module("LayerNorm", layer_norm(c))),
        dropout(c.dropout) {
    // transformers keeps the positions as a buffer, and its checkpoints hold it.
    position_ids = register_buffer("position_ids", torch::arange(c.max_positions).unsqueeze(0));
  }
  torch::Tensor forward(const torch::Tensor& input_ids) {
    const int64_t length = input_ids.size(1);
    auto x = word_embeddings->forward(input_ids) +
             token_type_embeddings->forward(torch::zeros_like(input_ids));
    x = x + position_embeddings->forward(position_ids.slice(1, 0, length));
    return torch::dropout(LayerNorm->forward(x), dropout, is_training());
  }
  torch::nn::Embedding word_embeddings, position_embeddings, token_type_embeddings;
  torch::nn::LayerNorm LayerNorm;
  torch::Tensor position_ids;
  double dropout;
};

struct SelfAttention : torch::nn::Module {
  explicit SelfAttention(const Config& c)
      : query(register_module("query", torch::nn::Linear(c.hidden, c.hidden))),
        key(register_module("key", torch::nn::Linear(c.hidden, c.hidden))),
        value(register_module("value", torch::nn::Linear(c.hidden, c.hidden))),
        heads(c.heads),
        head_size(c.hidden / c.heads),
        dropout(c.dropout) {}
  // mask_bias: [batch, 1, 1, length], 0 on tokens and the dtype's lowest value on padding.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask_bias) {
    const int64_t batch = x.size(0), length = x.size(1);
    auto split = [&](const torch::Tensor& t) {
      return t.view({batch, length, heads, head_size}).permute({0, 2, 1, 3});
    };
    const auto q = split(query->forward(x)), k = split(key->forward(x)),
               v = split(value->forward(x));
    auto scores = torch::matmul(q, k.transpose(-1, -2));
    scores = scores / std::sqrt(static_cast<double>(head_size)) + mask_bias;
    const auto probs = torch::dropout(torch::softmax(scores, -1), dropout, is_training());
    return torch::matmul(probs, v)
        .permute({0, 2, 1, 3})
        .contiguous()
        .view({batch, length, heads * head_size});
  }
  torch::nn::Linear query, key, value;
  int64_t heads, head_size;
  double dropout;
};

// dense, dropout, then LayerNorm of the sum with the block's input (BertSelfOutput, BertOutput).
struct Output : torch::nn::Module {
  Output(const Config& c, int64_t in)
      : dense(register_module("dense", torch::nn::Linear(in, c.hidden))),
        LayerNorm(register_module("LayerNorm", layer_norm(c))),
        dropout(c.dropout) {}
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& input) {
    return LayerNorm->forward(torch::dropout(dense->forward(x), dropout, is_training()) + input);
  }
  torch::nn::Linear dense;
  torch::nn::LayerNorm LayerNorm;
  double dropout;
};

struct Attention : torch::nn::Module {
  explicit Attention(const Config& c)
      : self(register_module("self", std::make_shared<SelfAttention>(c))),
        output(register_module("output", std::make_shared<Output>(c, c.hidden))) {}
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask_bias) {
    return output->forward(self->forward(x, mask_bias), x);
  }
  std::shared_ptr<SelfAttention> self;
  std::shared_ptr<Output> output;
};

struct Intermediate : torch::nn::Module {
  explicit Intermediate(const Config& c)
      : dense(register_module("dense", torch::nn::Linear(c.hidden, c.intermediate))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::gelu(dense->forward(x)); }
  torch::nn::Linear dense;
};

struct Layer : torch::nn::Module {
  explicit Layer(const Config& c)
      : attention(register_module("attention", std::make_shared<Attention>(c))),
        intermediate(register_module("intermediate", std::make_shared<Intermediate>(c))),
        output(register_module("output", std::make_shared<Output>(c, c.intermediate))) {}
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask_bias) {
    const auto a = attention->forward(x, mask_bias);
    return output->forward(intermediate->forward(a), a);
  }
  std::shared_ptr<Attention> attention;
  std::shared_ptr<Intermediate> intermediate;
  std::shared_ptr<Output> output;
};

struct Encoder : torch::nn::Module {
  explicit Encoder(const Config& c) : layer(register_module("layer", torch::nn::ModuleList())) {
    for (int64_t i = 0; i < c.layers; ++i) layer->push_back(std::make_shared<Layer>(c));
  }
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& mask_bias) {
    for (const auto& l : *layer) x = l->as<Layer>()->forward(x, mask_bias);
    return x;
  }
  torch::nn::ModuleList layer;
};

// BertModel without the pooler: the token states of the last layer.
struct Model : torch::nn::Module {
  explicit Model(const Config& c)
      : embeddings(register_module("embeddings", std::make_shared<Embeddings>(c))),
        encoder(register_module("encoder", std::make_shared<Encoder>(c))) {}
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
    // transformers' extended attention mask: (1 - mask) * the dtype's lowest value.
    const auto mask = attention_mask.to(torch::kFloat).unsqueeze(1).unsqueeze(2);
    const auto bias = (1.0 - mask) * std::numeric_limits<float>::lowest();
    return encoder->forward(embeddings->forward(input_ids), bias);
  }
  std::shared_ptr<Embeddings> embeddings;
  std::shared_ptr<Encoder> encoder;
};

// transformers' _init_weights for BERT: normal(0, initializer_range) weights, zero biases and the
// padding row, LayerNorm at one and zero. A pretrained checkpoint then overwrites what it holds.
inline void init_weights(torch::nn::Module& root, const Config& c) {
  torch::NoGradGuard no_grad;
  const auto modules = root.modules(/*include_self=*/false);  // root holds no tensors itself
  for (auto& m : modules) {
    if (auto* linear = m->as<torch::nn::Linear>()) {
      torch::nn::init::normal_(linear->weight, 0.0, c.initializer_range);
      if (linear->bias.defined()) torch::nn::init::zeros_(linear->bias);
    } else if (auto* embedding = m->as<torch::nn::Embedding>()) {
      torch::nn::init::normal_(embedding->weight, 0.0, c.initializer_range);
    } else if (auto* norm = m->as<torch::nn::LayerNorm>()) {
      torch::nn::init::ones_(norm->weight);
      torch::nn::init::zeros_(norm->bias);
    }
  }
  for (auto& m : modules)
    if (auto* embeddings = m->as<Embeddings>())
      embeddings->word_embeddings->weight[c.pad_token_id].zero_();
}

// sentence-transformers' mean pooling over the attention mask.
inline torch::Tensor mean_pool(const torch::Tensor& states, const torch::Tensor& attention_mask) {
  const auto mask = attention_mask.unsqueeze(-1).expand(states.sizes()).to(states.dtype());
  return (states * mask).sum(1) / torch::clamp(mask.sum(1), 1e-9);
}

// Its Normalize module: L2 normalisation of each embedding.
inline torch::Tensor normalize(const torch::Tensor& embeddings) {
  namespace F = torch::nn::functional;
  return F::normalize(embeddings, F::NormalizeFuncOptions().p(2).dim(1));
}

}  // namespace bert
