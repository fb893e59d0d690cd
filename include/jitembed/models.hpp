// Umbrella header of the models layer: the model concept, any_model, the text embedder, and each model
// family whose component is linked (JITEMBED_HAS_MODELS_IMAGE: image-latent; JITEMBED_HAS_MODELS_VIDEO:
// video-latent and the reference set; JITEMBED_HAS_TOKENIZERS: the Hugging Face tokenizer.json reader).
#pragma once

#include "jitembed/models/any_model.hpp"
#include "jitembed/models/emulated_latency.hpp"
#include "jitembed/models/model.hpp"
#include "jitembed/models/preprocess_input.hpp"
#include "jitembed/models/text_embed.hpp"
#if defined(JITEMBED_HAS_MODELS_IMAGE)
#include "jitembed/models/image_latent.hpp"
#endif
#if defined(JITEMBED_HAS_MODELS_VIDEO)
#include "jitembed/models/reference.hpp"
#include "jitembed/models/video_latent.hpp"
#endif
#if defined(JITEMBED_HAS_TOKENIZERS)
#include "jitembed/models/hf_tokenizer.hpp"
#endif
