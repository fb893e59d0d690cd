// Umbrella header of the codecs: includes each codec whose component is linked (JITEMBED_HAS_<C>).
#pragma once

#include "jitembed/codec/codec.hpp"

#if defined(JITEMBED_HAS_ZSTD)
#include "jitembed/codec/shuffle.hpp"
#include "jitembed/codec/text.hpp"
#include "jitembed/codec/zstd.hpp"
#endif
#if defined(JITEMBED_HAS_JPEG)
#include "jitembed/codec/jpeg.hpp"
#endif
#if defined(JITEMBED_HAS_VIDEO)
#include "jitembed/codec/video.hpp"
#endif
