// Umbrella header of the models layer: the model concept, any_model and the CPU reference embedders.
#pragma once

#include "jitembed/models/any_model.hpp"
#include "jitembed/models/emulated_latency.hpp"
#include "jitembed/models/image_latent.hpp"
#include "jitembed/models/model.hpp"
#include "jitembed/models/reference.hpp"
#include "jitembed/models/text_embed.hpp"
#include "jitembed/models/video_latent.hpp"
