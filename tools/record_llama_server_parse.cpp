// record_llama_server_parse: a fixture generator, NOT part of llamapy (never built by
// tools/dev_build.sh, never linked into llamapy). It asks llama.cpp's chat code (the
// libllama-common of the 0.3.36 sdist that llamapy mirrors) how llama-server would
// split finished model replies into content, reasoning_content and tool_calls, so
// that tests/test_chat_parse_llama_server.py can hold llamapy's parser to the same
// answers without any C++ at test time.
//
// Build and run through tools/record_llama_server_parse.py (it compiles this file
// with g++ against a llama.cpp build and writes the JSON fixture); by hand:
//
//     g++ -std=c++17 -O1 -I SDIST/common -I SDIST/include -I SDIST/ggml/include -I SDIST/vendor \
//         tools/record_llama_server_parse.cpp -L LIBS -lllama-common -lllama -lggml -lggml-base \
//         -Wl,-rpath,LIBS -o record_llama_server_parse
//     ./record_llama_server_parse cases.json out.json
//
// cases.json: {"cases": [{"id", "template_path", "bos", "eos", "tools" (OpenAI tool
// list), "tool_choice", "reasoning_format", "enable_thinking", "text"}, ...]}.
// Per case it follows llama-server's request path (tools/server/server-common.cpp,
// oaicompat_chat_params_parse, and server-schema.cpp's chat parser fields):
//   1. templates from the template text and the BOS/EOS texts (no model);
//   2. inputs: one user message, the tools, tool_choice, parallel_tool_calls from the
//      template's capabilities (the server's default), reasoning_format, and
//      enable_thinking both as the input flag and as chat_template_kwargs (as a client
//      sending chat_template_kwargs={"enable_thinking": ...} gets);
//   3. chat params = templates_apply(inputs);
//   4. parser params from the chat params, with reasoning_format, parse_tool_calls
//      (tools given and tool_choice != none) and the serialized PEG parser loaded;
//   5. the text parsed as a finished reply (is_partial = false).
// A parse that throws (llama-server answers the request with an error then) is recorded
// as {"error": message}.
#include "chat.h"
#include "json.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

using njson = nlohmann::ordered_json;

static std::string read_text(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        throw std::runtime_error("cannot read " + path);
    }
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

static njson record_case(const njson & c) {
    const std::string source = read_text(c.at("template_path").get<std::string>());
    auto tmpls = common_chat_templates_init(nullptr, source, c.value("bos", std::string()), c.value("eos", std::string()));

    njson messages = c.contains("messages") ? c.at("messages")
                                            : njson::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}});
    njson tools = c.value("tools", njson::array());
    const std::string tool_choice = c.value("tool_choice", std::string("auto"));
    const bool enable_thinking = c.value("enable_thinking", true);

    common_chat_templates_inputs inputs;
    inputs.messages            = common_chat_msgs_parse_oaicompat(common_json::parse(messages.dump()));
    inputs.tools               = common_chat_tools_parse_oaicompat(common_json::parse(tools.dump()));
    inputs.tool_choice         = common_chat_tool_choice_parse_oaicompat(tool_choice);
    inputs.parallel_tool_calls = common_chat_templates_get_caps(tmpls.get())["supports_parallel_tool_calls"];
    inputs.reasoning_format    = common_reasoning_format_from_name(c.value("reasoning_format", std::string("auto")));
    inputs.enable_thinking     = enable_thinking;
    if (c.contains("enable_thinking")) {
        inputs.chat_template_kwargs["enable_thinking"] = enable_thinking ? "true" : "false";
    }

    const common_chat_params chat_params = common_chat_templates_apply(tmpls.get(), inputs);

    common_chat_parser_params params(chat_params);
    params.reasoning_format = inputs.reasoning_format;
    params.parse_tool_calls = !inputs.tools.empty() && inputs.tool_choice != COMMON_CHAT_TOOL_CHOICE_NONE;
    if (!chat_params.parser.empty()) {
        params.parser.load(chat_params.parser);
    }

    njson out;
    out["format"]            = common_chat_format_name(chat_params.format);
    out["generation_prompt"] = chat_params.generation_prompt;
    out["parallel_tool_calls"] = inputs.parallel_tool_calls;
    try {
        const common_chat_msg msg = common_chat_parse(c.at("text").get<std::string>(), /* is_partial */ false, params);
        out["content"]           = msg.content;
        out["reasoning_content"] = msg.reasoning_content;
        njson calls              = njson::array();
        for (const auto & call : msg.tool_calls) {
            calls.push_back({{"name", call.name}, {"arguments", call.arguments}});
        }
        out["tool_calls"] = calls;
    } catch (const std::exception & e) {
        out["error"] = e.what();
    }
    return out;
}

int main(int argc, char ** argv) {
    if (argc != 3) {
        std::cerr << "usage: " << argv[0] << " cases.json out.json\n";
        return 2;
    }
    const njson cases = njson::parse(read_text(argv[1]));
    njson results = njson::array();
    for (const auto & c : cases.at("cases")) {
        njson r;
        try {
            r = record_case(c);
        } catch (const std::exception & e) {
            // the template itself failed (render or parser construction): recorded, not fatal
            r["error"] = std::string("apply: ") + e.what();
        }
        r["id"] = c.at("id");
        results.push_back(r);
    }
    std::ofstream(argv[2], std::ios::binary) << results.dump(1) << "\n";
    return 0;
}
