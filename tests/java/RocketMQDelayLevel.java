// What a RocketMQ broker makes of the messageDelayLevel of each broker.conf named on the command line, for
// tests/test_rocketmq_import.py. Read as BrokerStartup reads its -c file (Properties.load of an InputStream), the
// value set on MessageStoreConfig as MixAll.properties2Object sets a String (trimmed), then parsed by the loop of
// ScheduleMessageService.parseDelayLevel, copied from Apache RocketMQ (Apache License 2.0,
// broker/src/main/java/org/apache/rocketmq/broker/schedule/ScheduleMessageService.java), RocketMQ's jars not
// being installable here. One line per file: "FAIL <exception>" where the broker does not start, else "OK" and per
// level "<millis as the broker computes them>:<1 if the product fits a long, else 0>".
import java.io.BufferedInputStream;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Properties;

public class RocketMQDelayLevel {
    static final String DEFAULT = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

    public static void main(String[] args) throws Exception {
        for (String file : args) {
            Properties properties = new Properties();
            try (InputStream in = new BufferedInputStream(Files.newInputStream(Paths.get(file)))) {
                properties.load(in);
            } catch (IllegalArgumentException e) {
                System.out.println("FAIL load " + e.getClass().getSimpleName());
                continue;
            }
            String levelString = properties.getProperty("messageDelayLevel");
            levelString = levelString == null ? DEFAULT : levelString.trim();
            StringBuilder out = new StringBuilder("OK");
            try {
                HashMap<String, Long> timeUnitTable = new HashMap<>();
                timeUnitTable.put("s", 1000L);
                timeUnitTable.put("m", 1000L * 60);
                timeUnitTable.put("h", 1000L * 60 * 60);
                timeUnitTable.put("d", 1000L * 60 * 60 * 24);
                String[] levelArray = levelString.split(" ");
                for (int i = 0; i < levelArray.length; i++) {
                    String value = levelArray[i];
                    String ch = value.substring(value.length() - 1);
                    Long tu = timeUnitTable.get(ch);
                    long num = Long.parseLong(value.substring(0, value.length() - 1));
                    long delayTimeMillis = tu * num;
                    int exact = 1;
                    try {
                        Math.multiplyExact(tu.longValue(), num);
                    } catch (ArithmeticException e) {
                        exact = 0;
                    }
                    out.append(' ').append(delayTimeMillis).append(':').append(exact);
                }
            } catch (Exception e) {
                System.out.println("FAIL " + e.getClass().getSimpleName());
                continue;
            }
            System.out.println(out);
        }
    }
}
