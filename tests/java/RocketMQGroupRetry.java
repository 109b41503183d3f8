// What RocketMQ 5's gRPC clients make of a consumer group's retry policy, for tests/test_rocketmq_groups.py. One
// group per input line: "C <retryMaxTimes> <next ms, comma-separated>" (CUSTOMIZED) or "E <retryMaxTimes> <initial
// ms> <max ms> <multiplier>" (EXPONENTIAL), the fields of SubscriptionGroupConfig. The proxy's mergeSubscriptionData
// (maxAttempts = retryMaxTimes + 1, the long multiplier set on a protobuf float, delays through Durations.fromMillis)
// and the client's getNextAttemptDelay (CustomizedBackoffRetryPolicy, ExponentialBackoffRetryPolicy; Duration.ofNanos
// of Durations.toNanos) are copied from Apache RocketMQ and rocketmq-clients (Apache License 2.0:
// proxy/.../GrpcClientSettingsManager.java, java/client/.../retry/*BackoffRetryPolicy.java), with protobuf-java-util's
// Durations arithmetic, those jars not being installable here. The nack's delay reaches the proxy as
// Durations.fromNanos and becomes Durations.toMillis. One line out per group: "FAIL <exception>" where the client
// cannot take the settings, else "<maxAttempts>" and the delay in ms after each failed attempt 1 .. min(maxAttempts
// - 1, 70).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

public class RocketMQGroupRetry {
    static final long NANOS_PER_SECOND = 1_000_000_000L;
    static final long NANOS_PER_MILLISECOND = 1_000_000L;
    static final long MILLIS_PER_SECOND = 1000L;
    static final long DURATION_SECONDS_MAX = 315_576_000_000L;

    // protobuf Duration: seconds and nanos of one sign, checked as Durations.checkValid does
    static long[] normalized(long seconds, long nanos) {
        if (nanos <= -NANOS_PER_SECOND || nanos >= NANOS_PER_SECOND) {
            seconds = Math.addExact(seconds, nanos / NANOS_PER_SECOND);
            nanos = nanos % NANOS_PER_SECOND;
        }
        if (seconds > 0 && nanos < 0) {
            nanos += NANOS_PER_SECOND;
            seconds--;
        }
        if (seconds < 0 && nanos > 0) {
            nanos -= NANOS_PER_SECOND;
            seconds++;
        }
        if (seconds < -DURATION_SECONDS_MAX || seconds > DURATION_SECONDS_MAX) {
            throw new IllegalArgumentException("Duration is not valid");
        }
        return new long[] {seconds, nanos};
    }

    static long[] fromMillis(long milliseconds) {
        return normalized(milliseconds / MILLIS_PER_SECOND,
            (int) (milliseconds % MILLIS_PER_SECOND * NANOS_PER_MILLISECOND));
    }

    static long[] fromNanos(long nanoseconds) {
        return normalized(nanoseconds / NANOS_PER_SECOND, (int) (nanoseconds % NANOS_PER_SECOND));
    }

    static long toNanos(long[] d) {
        return Math.addExact(Math.multiplyExact(d[0], NANOS_PER_SECOND), d[1]);
    }

    static long toMillis(long[] d) {
        return Math.addExact(Math.multiplyExact(d[0], MILLIS_PER_SECOND), d[1] / NANOS_PER_MILLISECOND);
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] f = line.trim().split(" ");
            try {
                int retryMaxTimes = Integer.parseInt(f[1]);
                int maxAttempts = retryMaxTimes + 1;  // setMaxAttempts(groupConfig.getRetryMaxTimes() + 1)
                List<Duration> durations = new ArrayList<>();
                Duration initialBackoff = null;
                Duration maxBackoff = null;
                double backoffMultiplier = 0;
                if (f[0].equals("C")) {
                    for (String ms : f[2].split(",")) {
                        durations.add(Duration.ofNanos(toNanos(fromMillis(Long.parseLong(ms)))));
                    }
                    if (durations.isEmpty()) {
                        throw new IllegalArgumentException("durations must not be empty");
                    }
                } else {
                    initialBackoff = Duration.ofNanos(toNanos(fromMillis(Long.parseLong(f[2]))));
                    maxBackoff = Duration.ofNanos(toNanos(fromMillis(Long.parseLong(f[3]))));
                    float multiplier = Long.parseLong(f[4]);  // the protobuf float field
                    backoffMultiplier = multiplier;
                }
                StringBuilder row = new StringBuilder(Integer.toString(maxAttempts));
                for (int attempt = 1; attempt < maxAttempts && attempt <= 70; attempt++) {
                    Duration delay;
                    if (f[0].equals("C")) {
                        delay = attempt > durations.size() ? durations.get(durations.size() - 1)
                            : durations.get(attempt - 1);
                    } else {
                        double delayNanos = Math.min(initialBackoff.toNanos() * Math.pow(backoffMultiplier,
                            1.0 * (attempt - 1)), maxBackoff.toNanos());
                        delay = delayNanos <= 0 ? Duration.ZERO : Duration.ofNanos((long) delayNanos);
                    }
                    row.append(' ').append(toMillis(fromNanos(delay.toNanos())));
                }
                out.append(row).append('\n');
            } catch (RuntimeException e) {
                out.append("FAIL ").append(e.getClass().getSimpleName()).append('\n');
            }
        }
        System.out.print(out);
    }
}
