// The hybrid_parallel example's model: a small ViT-style encoder (patch embedding, one pre-LN transformer
// block) feeding a small transformer LM (a connector, token embedding, one pre-LN causal block, LM head).
// This file holds the configuration, the parameters and the single-rank reference forward + backward,
// written with math.hpp only; hybrid_parallel.cpp runs the same model sequence-parallel + tensor-parallel.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "jitembed/parallel/math.hpp"
#include "jitembed/parallel/shard.hpp"

namespace hybrid {

using namespace jitembed;
namespace pm = jitembed::parallel::math;

struct config {
  std::int64_t batch = 2;
  std::int64_t patches = 8, patch_dim = 16;              // encoder input [B, patches, patch_dim]
  std::int64_t enc_hidden = 32, enc_heads = 4, enc_ffn = 64;
  std::int64_t lm_hidden = 32, lm_heads = 4, lm_ffn = 64;
  std::int64_t vocab = 64, text = 8;                     // text ids [B, text + 1]: inputs and shifted targets
  float eps = 1e-5f;
  std::int64_t tokens() const { return patches + text; }  // LM sequence: image tokens then text tokens
};

using tensors = std::map<std::string, tensor>;

inline tensor randn(const shape& s, std::mt19937_64& gen, float scale) {
  tensor t = tensor::empty(s, dtype::f32);
  std::normal_distribution<float> d(0.0f, scale);
  for (std::uint64_t i = 0; i < t.numel(); ++i) t.view().data<float>()[i] = d(gen);
  return t;
}
inline tensor filled(const shape& s, float v) {
  tensor t = tensor::empty(s, dtype::f32);
  std::fill_n(t.view().data<float>(), t.numel(), v);
  return t;
}
inline tensor zeros_like(const tensor& t) { return tensor::zeros(t.shape(), t.dtype()); }

// Full parameters, the same on every rank (one seed).
inline tensors make_params(const config& c, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  const auto he = c.enc_hidden, hl = c.lm_hidden;
  tensors p;
  p["enc.patch.w"] = randn({he, c.patch_dim}, g, 0.25f);
  p["enc.patch.b"] = randn({he}, g, 0.1f);
  p["enc.ln1.g"] = filled({he}, 1.0f);
  p["enc.ln1.b"] = randn({he}, g, 0.05f);
  for (const char* n : {"enc.q.w", "enc.k.w", "enc.v.w", "enc.o.w"}) p[n] = randn({he, he}, g, 0.18f);
  p["enc.o.b"] = randn({he}, g, 0.05f);
  p["enc.ln2.g"] = filled({he}, 1.0f);
  p["enc.ln2.b"] = randn({he}, g, 0.05f);
  p["enc.fc1.w"] = randn({c.enc_ffn, he}, g, 0.18f);
  p["enc.fc1.b"] = randn({c.enc_ffn}, g, 0.05f);
  p["enc.fc2.w"] = randn({he, c.enc_ffn}, g, 0.12f);
  p["enc.fc2.b"] = randn({he}, g, 0.05f);
  p["lm.conn.w"] = randn({hl, he}, g, 0.18f);
  p["lm.conn.b"] = randn({hl}, g, 0.05f);
  p["lm.embed"] = randn({c.vocab, hl}, g, 0.5f);
  p["lm.ln1.g"] = filled({hl}, 1.0f);
  p["lm.ln1.b"] = randn({hl}, g, 0.05f);
  for (const char* n : {"lm.q.w", "lm.k.w", "lm.v.w", "lm.o.w"}) p[n] = randn({hl, hl}, g, 0.18f);
  p["lm.o.b"] = randn({hl}, g, 0.05f);
  p["lm.ln2.g"] = filled({hl}, 1.0f);
  p["lm.ln2.b"] = randn({hl}, g, 0.05f);
  p["lm.fc1.w"] = randn({c.lm_ffn, hl}, g, 0.18f);
  p["lm.fc1.b"] = randn({c.lm_ffn}, g, 0.05f);
  p["lm.fc2.w"] = randn({hl, c.lm_ffn}, g, 0.12f);
  p["lm.fc2.b"] = randn({hl}, g, 0.05f);
  p["lm.lnf.g"] = filled({hl}, 1.0f);
  p["lm.lnf.b"] = randn({hl}, g, 0.05f);
  p["lm.head.w"] = randn({c.vocab, hl}, g, 0.18f);
  return p;
}

struct batch {
  tensor patches;  // f32 [B, patches, patch_dim]
  tensor ids;      // i64 [B, text + 1]
};

inline batch make_batch(const config& c, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  batch b;
  b.patches = randn({c.batch, c.patches, c.patch_dim}, g, 1.0f);
  b.ids = tensor::empty({c.batch, c.text + 1}, dtype::i64);
  std::uniform_int_distribution<std::int64_t> tok(0, c.vocab - 1);
  for (std::uint64_t i = 0; i < b.ids.numel(); ++i) b.ids.view().data<std::int64_t>()[i] = tok(g);
  return b;
}

// ids[:, 0:text] (inputs) and ids[:, 1:text+1] (targets).
inline std::pair<tensor, tensor> split_ids(const config& c, const tensor& ids) {
  return {parallel::narrow(ids.view(), 1, 0, c.text), parallel::narrow(ids.view(), 1, 1, c.text)};
}

// --- small helpers over math.hpp -------------------------------------------------------------------------

inline shape with_last(const shape& s, std::int64_t last) {
  shape o = s;
  o[o.size() - 1] = last;
  return o;
}
inline tensor linear(const tensor& x, const tensor& w, const tensor* b) {
  tensor y = tensor::empty(with_last(x.shape(), w.size(0)), dtype::f32);
  const tensor_view bv = b ? b->view() : tensor_view();
  pm::linear_forward(x.view(), w.view(), b ? &bv : nullptr, y.view());
  return y;
}
// Accumulates dW (and db) into grads[name + ".w"/".b"]; returns dx.
inline tensor linear_back(const tensor& x, const tensor& w, const tensor& dy, tensors& grads, const std::string& name,
                          bool has_bias) {
  tensor dx = tensor::empty(x.shape(), dtype::f32);
  const tensor_view dxv = dx.view(), dw = grads.at(name + ".w").view();
  const tensor_view db = has_bias ? grads.at(name + ".b").view() : tensor_view();
  pm::linear_backward(x.view(), w.view(), dy.view(), &dxv, &dw, has_bias ? &db : nullptr);
  return dx;
}
inline tensor add(const tensor& a, const tensor& b) {
  tensor y = a.clone();
  pm::add_inplace(y.view(), b.view());
  return y;
}
inline tensor reshape(const tensor& t, const shape& s) { return t.reinterpret(t.dtype(), s).value(); }

struct ln_out {
  tensor y;
  pm::layer_norm_saved saved;
};
inline ln_out layer_norm(const tensor& x, const tensors& p, const std::string& name, float eps) {
  ln_out o{tensor::empty(x.shape(), dtype::f32), {}};
  o.saved = pm::layer_norm_forward(x.view(), p.at(name + ".g").view(), p.at(name + ".b").view(), eps, o.y.view());
  return o;
}
inline tensor layer_norm_back(const tensor& x, const tensors& p, const ln_out& f, const tensor& dy, tensors& grads,
                              const std::string& name) {
  tensor dx = tensor::empty(x.shape(), dtype::f32);
  const tensor_view dg = grads.at(name + ".g").view(), db = grads.at(name + ".b").view();
  pm::layer_norm_backward(x.view(), p.at(name + ".g").view(), f.saved, dy.view(), dx.view(), &dg, &db);
  return dx;
}
inline tensor gelu(const tensor& x) {
  tensor y = tensor::empty(x.shape(), dtype::f32);
  pm::gelu_forward(x.view(), y.view());
  return y;
}
inline tensor gelu_back(const tensor& x, const tensor& dy) {
  tensor dx = tensor::empty(x.shape(), dtype::f32);
  pm::gelu_backward(x.view(), dy.view(), dx.view());
  return dx;
}

inline tensors zero_grads(const tensors& params) {
  tensors g;
  for (const auto& [k, v] : params) g[k] = zeros_like(v);
  return g;
}

// --- the single-rank reference -----------------------------------------------------------------------

struct reference_result {
  float loss = 0;
  tensor enc_out;  // [B, patches, enc_hidden]
  tensor logits;   // [B, text, vocab]
  tensors grads;
};

// Attention over [B, S, hidden] with `heads` heads; returns out and keeps what backward needs.
struct attn_out {
  tensor out;
  pm::attention_saved saved;
};
inline attn_out attention(const tensor& q, const tensor& k, const tensor& v, std::int64_t heads, bool causal) {
  const auto b = q.size(0), s = q.size(1), h = q.size(2);
  const shape s4{b, s, heads, h / heads};
  attn_out o{tensor::empty(q.shape(), dtype::f32), {}};
  o.saved = pm::attention_forward(reshape(q, s4).view(), reshape(k, s4).view(), reshape(v, s4).view(), causal,
                                  reshape(o.out, s4));
  return o;
}

inline reference_result run_reference(const config& c, const tensors& p, const batch& in) {
  reference_result r;
  r.grads = zero_grads(p);
  tensors& g = r.grads;
  const auto [ids_in, targets] = split_ids(c, in.ids);
  // Encoder.
  tensor x0 = linear(in.patches, p.at("enc.patch.w"), &p.at("enc.patch.b"));
  ln_out a1 = layer_norm(x0, p, "enc.ln1", c.eps);
  tensor q = linear(a1.y, p.at("enc.q.w"), nullptr), k = linear(a1.y, p.at("enc.k.w"), nullptr),
         v = linear(a1.y, p.at("enc.v.w"), nullptr);
  attn_out at = attention(q, k, v, c.enc_heads, false);
  tensor x1 = add(x0, linear(at.out, p.at("enc.o.w"), &p.at("enc.o.b")));
  ln_out a2 = layer_norm(x1, p, "enc.ln2", c.eps);
  tensor h = linear(a2.y, p.at("enc.fc1.w"), &p.at("enc.fc1.b"));
  tensor gh = gelu(h);
  tensor x2 = add(x1, linear(gh, p.at("enc.fc2.w"), &p.at("enc.fc2.b")));
  r.enc_out = x2;
  // LM.
  tensor img = linear(x2, p.at("lm.conn.w"), &p.at("lm.conn.b"));
  tensor txt = tensor::empty({c.batch, c.text, c.lm_hidden}, dtype::f32);
  pm::embedding_forward(ids_in.view(), p.at("lm.embed").view(), txt.view());
  const tensor_view parts[] = {img.view(), txt.view()};
  tensor h0 = parallel::concat(parts, 1);
  ln_out b1 = layer_norm(h0, p, "lm.ln1", c.eps);
  tensor lq = linear(b1.y, p.at("lm.q.w"), nullptr), lk = linear(b1.y, p.at("lm.k.w"), nullptr),
         lv = linear(b1.y, p.at("lm.v.w"), nullptr);
  attn_out lat = attention(lq, lk, lv, c.lm_heads, true);
  tensor h1 = add(h0, linear(lat.out, p.at("lm.o.w"), &p.at("lm.o.b")));
  ln_out b2 = layer_norm(h1, p, "lm.ln2", c.eps);
  tensor m = linear(b2.y, p.at("lm.fc1.w"), &p.at("lm.fc1.b"));
  tensor gm = gelu(m);
  tensor h2 = add(h1, linear(gm, p.at("lm.fc2.w"), &p.at("lm.fc2.b")));
  ln_out bf = layer_norm(h2, p, "lm.lnf", c.eps);
  tensor ft = parallel::narrow(bf.y.view(), 1, c.patches, c.text);
  r.logits = linear(ft, p.at("lm.head.w"), nullptr);
  tensor dlogits = tensor::empty(r.logits.shape(), dtype::f32);
  const tensor_view dl2 = reshape(dlogits, {c.batch * c.text, c.vocab}).view();
  r.loss = pm::cross_entropy_forward_backward(reshape(r.logits, {c.batch * c.text, c.vocab}).view(),
                                              reshape(targets, {c.batch * c.text}).view(), &dl2);
  // LM backward.
  tensor dft = linear_back(ft, p.at("lm.head.w"), dlogits, g, "lm.head", false);
  tensor dbf = tensor::zeros(bf.y.shape(), dtype::f32);
  parallel::copy_into(dbf.view(), 1, c.patches, dft.view());
  tensor dh2 = layer_norm_back(h2, p, bf, dbf, g, "lm.lnf");
  tensor dgm = linear_back(gm, p.at("lm.fc2.w"), dh2, g, "lm.fc2", true);
  tensor dm = gelu_back(m, dgm);
  tensor db2 = linear_back(b2.y, p.at("lm.fc1.w"), dm, g, "lm.fc1", true);
  tensor dh1 = add(dh2, layer_norm_back(h1, p, b2, db2, g, "lm.ln2"));
  tensor dlat = linear_back(lat.out, p.at("lm.o.w"), dh1, g, "lm.o", true);
  tensor dlq = tensor::empty(lq.shape(), dtype::f32), dlk = tensor::empty(lk.shape(), dtype::f32),
         dlv = tensor::empty(lv.shape(), dtype::f32);
  {
    const shape s4{c.batch, c.tokens(), c.lm_heads, c.lm_hidden / c.lm_heads};
    pm::attention_backward(reshape(lq, s4).view(), reshape(lk, s4).view(), reshape(lv, s4).view(), lat.saved,
                           reshape(dlat, s4).view(), reshape(dlq, s4).view(), reshape(dlk, s4).view(),
                           reshape(dlv, s4).view());
  }
  tensor db1 = linear_back(b1.y, p.at("lm.q.w"), dlq, g, "lm.q", false);
  pm::add_inplace(db1.view(), linear_back(b1.y, p.at("lm.k.w"), dlk, g, "lm.k", false).view());
  pm::add_inplace(db1.view(), linear_back(b1.y, p.at("lm.v.w"), dlv, g, "lm.v", false).view());
  tensor dh0 = add(dh1, layer_norm_back(h0, p, b1, db1, g, "lm.ln1"));
  tensor dimg = parallel::narrow(dh0.view(), 1, 0, c.patches);
  tensor dtxt = parallel::narrow(dh0.view(), 1, c.patches, c.text);
  pm::embedding_backward(ids_in.view(), dtxt.view(), g.at("lm.embed").view());
  tensor dx2 = linear_back(x2, p.at("lm.conn.w"), dimg, g, "lm.conn", true);
  // Encoder backward.
  tensor dgh = linear_back(gh, p.at("enc.fc2.w"), dx2, g, "enc.fc2", true);
  tensor dh = gelu_back(h, dgh);
  tensor da2 = linear_back(a2.y, p.at("enc.fc1.w"), dh, g, "enc.fc1", true);
  tensor dx1 = add(dx2, layer_norm_back(x1, p, a2, da2, g, "enc.ln2"));
  tensor dat = linear_back(at.out, p.at("enc.o.w"), dx1, g, "enc.o", true);
  tensor dq = tensor::empty(q.shape(), dtype::f32), dk = tensor::empty(k.shape(), dtype::f32),
         dv = tensor::empty(v.shape(), dtype::f32);
  {
    const shape s4{c.batch, c.patches, c.enc_heads, c.enc_hidden / c.enc_heads};
    pm::attention_backward(reshape(q, s4).view(), reshape(k, s4).view(), reshape(v, s4).view(), at.saved,
                           reshape(dat, s4).view(), reshape(dq, s4).view(), reshape(dk, s4).view(), reshape(dv, s4).view());
  }
  tensor da1 = linear_back(a1.y, p.at("enc.q.w"), dq, g, "enc.q", false);
  pm::add_inplace(da1.view(), linear_back(a1.y, p.at("enc.k.w"), dk, g, "enc.k", false).view());
  pm::add_inplace(da1.view(), linear_back(a1.y, p.at("enc.v.w"), dv, g, "enc.v", false).view());
  tensor dx0 = add(dx1, layer_norm_back(x0, p, a1, da1, g, "enc.ln1"));
  (void)linear_back(in.patches, p.at("enc.patch.w"), dx0, g, "enc.patch", true);
  return r;
}

}  // namespace hybrid
