// Umbrella header of the sample format: records, batches, shards, the WebDataset reader and data sets.
#pragma once

#include "jitembed/format/batch_builder.hpp"
#include "jitembed/format/batch_view.hpp"
#include "jitembed/format/dataset.hpp"
#include "jitembed/format/field.hpp"
#include "jitembed/format/gather.hpp"
#include "jitembed/format/record_builder.hpp"
#include "jitembed/format/record_view.hpp"
#include "jitembed/format/shard_reader.hpp"
#include "jitembed/format/shard_writer.hpp"
#include "jitembed/format/webdataset.hpp"
