// HTTP/1.1 on Boost.Beast: the Boost-free message types, the async server and the pooled client.
#pragma once

#include "jitembed/net/http/client.hpp"
#include "jitembed/net/http/message.hpp"
#include "jitembed/net/http/options.hpp"
#include "jitembed/net/http/server.hpp"
