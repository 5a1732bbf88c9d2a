<?php
// A PHP peer for the mcp-php tests: PHP's own hash_hmac, base64 and json_decode, driven one JSON
// request per stdin line, one JSON answer per stdout line. Written for these tests (not the
// SDK's code): it spells the SDK's recipe as DESIGN.md section 3 states it.
function unb64(string $text): string {
    return base64_decode(strtr($text, '-_', '+/'), true);
}
while (($line = fgets(STDIN)) !== false) {
    $request = json_decode($line, true);
    $parts = explode('.', $request['token']);
    $mac = hash_hmac('sha256', $parts[0], unb64($request['key']), true);
    if (count($parts) !== 2 || !hash_equals($mac, unb64($parts[1]))) {
        $answer = ['error' => 'mac'];
    } else {
        $body = json_decode(unb64($parts[0]), true);
        $answer = ['exp' => $body['exp'], 'data' => $body['data']];
    }
    echo json_encode($answer, JSON_PRESERVE_ZERO_FRACTION), "\n";
}
