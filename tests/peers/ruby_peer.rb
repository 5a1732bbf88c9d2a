# A Ruby peer for the mcp-rb tests: Ruby's own JSON generator, Float#to_s and OpenSSL, driven
# one JSON request per stdin line, one JSON answer per stdout line. Written for these tests
# (not the SDK's code): it spells the SDK's recipe as DESIGN.md section 3 states it.
require "json"
require "openssl"
require "base64"
require "digest"

def sorted(value)
  case value
  when Hash then value.keys.sort.to_h { |name| [name, sorted(value[name])] }
  when Array then value.map { |item| sorted(item) }
  else value
  end
end

def unb64(text)
  Base64.urlsafe_decode64(text + "=" * ((4 - text.length % 4) % 4))
end

STDOUT.sync = true
STDIN.each_line do |line|
  request = JSON.parse(line)
  answer =
    case request["op"]
    when "digest"
      text = JSON.generate(sorted(JSON.parse(request["arguments_json"])))
      { "canonical" => text, "digest" => Digest::SHA256.hexdigest(text) }
    when "open"
      blob = unb64(request["token"].delete_prefix("v1."))
      cipher = OpenSSL::Cipher.new("aes-256-gcm").decrypt
      cipher.key = unb64(request["key"])
      cipher.iv = blob[0, 12]
      cipher.auth_tag = blob[-16..]
      cipher.auth_data = "v1."
      begin
        plain = cipher.update(blob[12...-16]) + cipher.final
        { "claims" => JSON.parse(plain) }
      rescue OpenSSL::Cipher::CipherError
        { "error" => "authentication failed" }
      end
    end
  puts JSON.generate(answer)
end
