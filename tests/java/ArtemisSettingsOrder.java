// The order an Apache ActiveMQ Artemis broker gives the address settings that match an address, computed by the
// JVM: Artemis's MatchComparator and its pattern for a match (copied from Artemis 2.44's
// HierarchicalObjectRepository and Match, Apache License 2.0, for '.', '#' and '*'), and java.util.HashMap filled
// as FileConfigurationParser (the configuration's map, in broker.xml order), deployAddressSettingsFromConfiguration
// and addMatch (the repository's exact and wildcard maps) fill it, sorted as getMatches sorts.
//
// Run with `java ArtemisSettingsOrder.java`. Reads pairs of lines, the patterns in broker.xml order and then the
// addresses, each tab-separated; writes one line per address: the patterns matching it, in Artemis's order.
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

public class ArtemisSettingsOrder {

   record Match(String match, Pattern pattern) { }

   static Pattern compile(String match) {  // Match's constructor
      String actMatch = match;
      if ("#".equals(match)) {
         actMatch = ".*";
      } else {
         actMatch = actMatch.replace(".#", "#");
         actMatch = actMatch.replace(".", "\\.");
         actMatch = actMatch.replace("$", "\\$");
         actMatch = actMatch.replace("*", String.format("[^%s]+", Pattern.quote(".")));
         actMatch = actMatch.replace("#", String.format("(%s.+)*", Pattern.quote(".")));
      }
      return Pattern.compile(actMatch + "$");
   }

   static int compare(final String o1, final String o2) {  // MatchComparator.compare
      String anyWords = "#";
      String singleWord = "*";
      String quotedDelimiter = Pattern.quote(".");
      if (o1.contains(anyWords) && !o2.contains(anyWords)) {
         return +1;
      } else if (!o1.contains(anyWords) && o2.contains(anyWords)) {
         return -1;
      } else if (o1.contains(anyWords) && o2.contains(anyWords)) {
         return o2.length() - o1.length();
      } else if (o1.contains(singleWord) && !o2.contains(singleWord)) {
         return +1;
      } else if (!o1.contains(singleWord) && o2.contains(singleWord)) {
         return -1;
      } else if (o1.contains(singleWord) && o2.contains(singleWord)) {
         String[] leftSplits = o1.split(quotedDelimiter);
         String[] rightSplits = o2.split(quotedDelimiter);
         for (int i = 0; i < leftSplits.length; i++) {
            if (i >= rightSplits.length) {
               return -1;
            }
            String left = leftSplits[i];
            String right = rightSplits[i];
            if (left.equals(singleWord) && !right.equals(singleWord)) {
               return +1;
            } else if (!left.equals(singleWord) && right.equals(singleWord)) {
               return -1;
            }
         }
      }
      return o1.length() - o2.length();
   }

   public static void main(String[] args) throws IOException {
      BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      PrintWriter out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
      String line;
      while ((line = in.readLine()) != null) {
         String[] addresses = in.readLine().split("\t");
         Map<String, String> configured = new HashMap<>();
         for (String match : line.split("\t")) {
            if (!configured.containsKey(match)) {
               configured.put(match, match);
            }
         }
         Map<String, Match> exactMatches = new HashMap<>();
         Map<String, Match> wildcardMatches = new HashMap<>();
         for (Map.Entry<String, String> entry : configured.entrySet()) {
            String match = entry.getKey();
            Match m = new Match(match, compile(match));
            if (match.contains("#") || match.contains("*")) {
               wildcardMatches.put(match, m);
            } else {
               exactMatches.put(match, m);
            }
         }
         for (String address : addresses) {
            List<String> matches = new ArrayList<>();
            Match exact = exactMatches.get(address);
            if (exact != null) {
               matches.add(exact.match());
            }
            wildcardMatches.values().stream()
               .filter(m -> m.pattern().matcher(address).matches())
               .sorted((m1, m2) -> compare(m1.match(), m2.match()))
               .forEach(m -> matches.add(m.match()));
            out.println(String.join("\t", matches));
         }
      }
      out.flush();
   }
}
