//! What an answer must show to count as a success: `spec.test.checks`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The longest checks.bodyContains, in bytes (loadgen's bound too).
pub const MAX_BODY_CONTAINS: usize = loadgen::check::MAX_NEEDLE;

/// What each answer must show to count as a success. An answer that fails
/// a check is an error of kind check (status.results.errors.check),
/// counted in the error ratio like any other error. Omitted: an answer is
/// an error only by its status class (4xx: http4xx, 5xx: http5xx).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Checks {
    /// The statuses an answer must have (1-32 distinct codes, each
    /// 101-599, e.g. [200, 204]; an interim 1xx answer is never the
    /// final one); an answer with any other, whatever its
    /// class, is an error of kind check, and one listed passes even if it
    /// is a 4xx or 5xx. Omitted: any status but 4xx and 5xx passes, a 4xx
    /// counting as an error of kind http4xx and a 5xx as http5xx.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 32), inner(range(min = 101, max = 599)), extend("x-kubernetes-list-type" = "set"))]
    pub status_codes: Vec<i32>,
    /// A substring (1-1024 bytes in UTF-8; a longer one fails the run as
    /// InvalidSpec) every answer's body must contain, compared byte for byte with the body as the server sent it
    /// (not decompressed: send `Accept-Encoding: identity` in
    /// test.headers if the server compresses by default; chunked framing
    /// removed), searched as the body arrives, never held whole.
    /// An answer whose status passed but whose body lacks it is an error
    /// of kind check (so an answer without a body, such as a 204, always
    /// fails it). Not with method HEAD. Omitted: the body is not looked at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub body_contains: Option<String>,
}

impl Checks {
    /// Why the checks cannot run, beyond what the schema checks: the
    /// substring's length in bytes (the schema counts characters).
    pub fn invalid(&self) -> Option<String> {
        let bytes = self.body_contains.as_ref().map_or(0, String::len);
        (bytes > MAX_BODY_CONTAINS)
            .then(|| format!("test.checks.bodyContains is {bytes} bytes, more than {MAX_BODY_CONTAINS}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_substring_is_bounded_in_bytes_not_characters() {
        let fits = Checks { body_contains: Some("é".repeat(512)), ..Checks::default() };
        assert_eq!(fits.invalid(), None);
        let over = Checks { body_contains: Some("é".repeat(513)), ..Checks::default() };
        assert_eq!(over.invalid().as_deref(), Some("test.checks.bodyContains is 1026 bytes, more than 1024"));
        assert_eq!(Checks::default().invalid(), None);
    }

    #[test]
    fn the_schema_bounds_the_codes_and_the_substring() {
        let schema = serde_json::to_value(schemars::schema_for!(Checks)).unwrap_or_default();
        let codes = &schema["properties"]["statusCodes"];
        assert_eq!((codes["minItems"].as_u64(), codes["maxItems"].as_u64()), (Some(1), Some(32)));
        assert_eq!(
            (codes["items"]["minimum"].as_f64(), codes["items"]["maximum"].as_f64()),
            (Some(101.0), Some(599.0))
        );
        assert_eq!(codes["x-kubernetes-list-type"], "set");
        let body = &schema["properties"]["bodyContains"];
        assert_eq!((body["minLength"].as_u64(), body["maxLength"].as_u64()), (Some(1), Some(1024)));
    }
}
