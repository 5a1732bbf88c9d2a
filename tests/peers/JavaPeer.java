// A Java 17 peer for the mcp-java tests: the JDK's javax.crypto.Mac and java.util.Base64, and
// Debian's Jackson 2 as the SDK's JSON mapper, driven one JSON request per stdin line, one JSON
// answer per stdout line. Written for these tests from the format's rules (DESIGN.md section 3,
// tests/vectors/published/java-sdk/README.md), not from the SDK's code.
//
//   {"op":"seal","key":b64url,"state":s,"principal":p|null,"method":m,"name":n|null,"exp":ms}
//       -> {"token":t}
//   {"op":"open","key":b64url,"token":t,"principal":p|null,"method":m,"name":n|null,"now":ms}
//       -> {"state":s} | {"refused":true} | {"thrown":"java.lang.NullPointerException"}
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Base64;
import java.util.Objects;
import java.util.Optional;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

public final class JavaPeer {
    /** The payload, in the order its members are written. */
    record Payload(int v, String s, long exp, String p, String m, String n) {}

    private static final ObjectMapper MAPPER = new ObjectMapper();

    private static byte[] mac(byte[] key, String text) throws Exception {
        Mac hmac = Mac.getInstance("HmacSHA256");
        hmac.init(new SecretKeySpec(key, "HmacSHA256"));
        return hmac.doFinal(text.getBytes(StandardCharsets.US_ASCII));
    }

    private static String text(JsonNode request, String name) {
        JsonNode value = request.get(name);
        return value == null || value.isNull() ? null : value.asText();
    }

    static String seal(byte[] key, String state, long exp, String p, String m, String n)
            throws Exception {
        String json = MAPPER.writeValueAsString(new Payload(1, state, exp, p, m, n));
        Base64.Encoder encoder = Base64.getUrlEncoder().withoutPadding();
        String body = encoder.encodeToString(json.getBytes(StandardCharsets.UTF_8));
        return body + "." + encoder.encodeToString(mac(key, body));
    }

    /** The SDK's rules for open: empty for a refusal; a null state throws. */
    static Optional<String> open(byte[] key, String token, long now, String p, String m, String n)
            throws Exception {
        int dot = token.lastIndexOf('.');
        if (dot < 0) {
            return Optional.empty();
        }
        String body = token.substring(0, dot);
        byte[] expected = mac(key, body);
        byte[] given;
        Payload payload;
        try {
            given = Base64.getUrlDecoder().decode(token.substring(dot + 1));
        } catch (IllegalArgumentException e) {
            return Optional.empty();
        }
        if (!MessageDigest.isEqual(expected, given)) {
            return Optional.empty();
        }
        try {
            byte[] json = Base64.getUrlDecoder().decode(body);
            payload = MAPPER.readValue(new String(json, StandardCharsets.UTF_8), Payload.class);
        } catch (Exception e) {
            return Optional.empty();
        }
        if (payload.exp() < now) {
            return Optional.empty();
        }
        if (!Objects.equals(payload.p(), p) || !Objects.equals(payload.m(), m)
                || !Objects.equals(payload.n(), n)) {
            return Optional.empty();
        }
        return Optional.of(payload.s());
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            JsonNode request = MAPPER.readTree(line);
            byte[] key = Base64.getUrlDecoder().decode(request.get("key").asText());
            ObjectNode answer = MAPPER.createObjectNode();
            String p = text(request, "principal");
            String m = text(request, "method");
            String n = text(request, "name");
            if ("seal".equals(request.get("op").asText())) {
                long exp = request.get("exp").asLong();
                answer.put("token", seal(key, text(request, "state"), exp, p, m, n));
            } else {
                long now = request.get("now").asLong();
                try {
                    Optional<String> state = open(key, request.get("token").asText(), now, p, m, n);
                    if (state.isPresent()) {
                        answer.put("state", state.get());
                    } else {
                        answer.put("refused", true);
                    }
                } catch (NullPointerException e) {
                    answer.put("thrown", e.getClass().getName());
                }
            }
            System.out.write(MAPPER.writeValueAsBytes(answer));
            System.out.write('\n');
            System.out.flush();
        }
    }
}
