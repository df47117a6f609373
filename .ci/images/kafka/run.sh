# The CI Kafka image's entrypoint: server.properties from the KAFKA_* variables (as
# apache/kafka reads them: KAFKA_LOG_DIRS -> log.dirs), the log directory formatted
# once with CLUSTER_ID, then the broker in the foreground.
set -euo pipefail
config=/opt/kafka/config/server.properties
: > "$config"
while IFS='=' read -r name value; do
    case "$name" in
        KAFKA_HEAP_OPTS|KAFKA_OPTS|KAFKA_LOG4J_OPTS|KAFKA_JVM_PERFORMANCE_OPTS) continue ;;
        KAFKA_*)
            key=$(printf '%s' "${name#KAFKA_}" | tr '[:upper:]' '[:lower:]' | tr '_' '.')
            printf '%s=%s\n' "$key" "$value" >> "$config"
            ;;
    esac
done < <(env)
java=(java ${KAFKA_HEAP_OPTS:--Xmx512m -Xms256m} -XX:+UseG1GC -Djava.awt.headless=true
      -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties -cp "/opt/kafka/libs/*")
"${java[@]}" kafka.tools.StorageTool format "--cluster-id=${CLUSTER_ID:?set CLUSTER_ID}" \
    --config "$config" --ignore-formatted
exec "${java[@]}" kafka.Kafka "$config"
