/// What to do with a request body before reading it, decided from `CONTENT_LENGTH` alone so
/// an oversized body is refused without being buffered.
enum RequestBodyPlan: Sendable, Equatable {
    /// Read exactly this many bytes, then expect end of input.
    case readExactly(Int)
    /// No usable length: read until end of input, refusing more than `limit` bytes.
    case readToEnd(limit: Int)
    /// Answer this error; the caller drains (bounded) and discards the input.
    case reject(APIError)
}

enum RequestBodyPolicy {
    /// `contentLength` is the raw `CONTENT_LENGTH` param (nginx sends it empty when absent).
    static func plan(contentLength: String?, limit: Int) -> RequestBodyPlan {
        guard let text = contentLength, !text.isEmpty else { return .readToEnd(limit: limit) }
        guard text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else {
            return .reject(.badRequest("invalid Content-Length", code: "bad_content_length"))
        }
        guard let length = Int(text), length <= limit else { return .reject(tooLarge(limit)) }
        return .readExactly(length)
    }

    /// The verdict once the body was read: `received` bytes, and whether more input followed.
    static func verdict(plan: RequestBodyPlan, received: Int, moreInput: Bool) -> APIError? {
        switch plan {
        case .readExactly(let expected):
            if received < expected {
                return .badRequest("request body shorter than Content-Length", code: "bad_content_length")
            }
            if moreInput {
                return .badRequest("request body longer than Content-Length", code: "bad_content_length")
            }
            return nil
        case .readToEnd(let limit):
            return received > limit || moreInput ? tooLarge(limit) : nil
        case .reject(let error):
            return error
        }
    }

    static func tooLarge(_ limit: Int) -> APIError {
        .payloadTooLarge("request body exceeds \(limit) bytes")
    }
}
